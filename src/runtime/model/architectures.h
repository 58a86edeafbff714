#pragma once
// The runtime's architectures by config.json model_type, one row each: the
// model_type, the recipe family it belongs to (recipe `arch:`, `selq synth
// --arch`), its loader and whether it runs layer by layer (rounding gptq, the
// planner's measured tiers). load_model opens the checkpoint once, reads its
// model_type once and hands both to the row's loader.
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"
#include "runtime/model/causal_lm.h"

namespace selq::runtime {

struct RuntimeArchitecture {
  const char* model_type;
  const char* family;  // "llama", "deepseek-v3"
  std::unique_ptr<CausalLM> (*load)(std::shared_ptr<const io::Checkpoint> ck, const std::string& path);
  bool layer_by_layer;
  const char* note;  // what else the loader requires of the config, or ""
};

std::span<const RuntimeArchitecture> runtime_architectures();
// The row of a model_type, or nullptr.
const RuntimeArchitecture* find_runtime_architecture(std::string_view model_type);
// "llama, mistral, qwen2 and deepseek_v3", the model_types that run layer by layer.
std::string layer_by_layer_model_types_text();
// Unsupported in one line unless the runtime runs the checkpoint's model_type
// (before anything else is read: its tokenizer, the text).
void require_runtime_architecture(const std::string& path);
// Opens `path`, reads its model_type and checks that its row is of `family`
// (a loader called directly, not through load_model); the opened checkpoint.
std::shared_ptr<const io::Checkpoint> checked_checkpoint(const std::string& path, std::string_view family);

}  // namespace selq::runtime
