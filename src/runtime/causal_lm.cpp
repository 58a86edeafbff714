// The registry of runtime architectures by config.json model_type.
#include "runtime/causal_lm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "runtime/deepseek_v3.h"
#include "runtime/hf_config.h"
#include "runtime/model.h"

namespace selq::runtime {

CausalLM::~CausalLM() = default;

namespace {
[[noreturn]] void no_layer_by_layer(const CausalLM& m) {
  throw_unsupported(fmt::format("{}: the runtime runs model_type '{}' whole, not layer by layer (which rounding "
                                "'gptq' needs; it does so for llama, mistral, qwen2 and deepseek_v3)",
                                m.path(), m.model_type()));
}
}  // namespace

std::int64_t CausalLM::layer_count() const { no_layer_by_layer(*this); }
std::int64_t CausalLM::hidden_size() const { no_layer_by_layer(*this); }
std::vector<float> CausalLM::embed(std::span<const std::int32_t>) { no_layer_by_layer(*this); }
void CausalLM::forward_layer(std::int64_t, float*, std::int64_t) { no_layer_by_layer(*this); }
std::vector<Linear*> CausalLM::layer_linears(std::int64_t) { no_layer_by_layer(*this); }

namespace {

struct Architecture {
  const char* model_type;
  std::unique_ptr<CausalLM> (*load)(const std::string& path);
};

std::unique_ptr<CausalLM> load_llama(const std::string& path) { return LlamaModel::load(path); }
std::unique_ptr<CausalLM> load_deepseek(const std::string& path) { return DeepseekV3Model::load(path); }

// One row per model_type. A new architecture adds its rows here.
constexpr Architecture kArchitectures[] = {
    {"llama", load_llama},
    {"mistral", load_llama},
    {"qwen2", load_llama},
    {"deepseek_v3", load_deepseek},
    {"kimi_k2", load_deepseek},     // DeepSeek-V3's config and code under another name
    {"deepseek_v2", load_deepseek}, // only with V3's router (sigmoid, noaux_tc): checked by the loader
};

}  // namespace

std::vector<std::string> runtime_model_types() {
  std::vector<std::string> out;
  for (const auto& a : kArchitectures) out.emplace_back(a.model_type);
  return out;
}

std::unique_ptr<CausalLM> load_model(const std::string& path) {
  const auto ck = io::Checkpoint::open(path);
  const auto& file = ck->config();
  if (!file.is_object()) throw_bad_input(fmt::format("{}: no config.json object", path));
  const auto& c = decoder_config(file);
  if (!c.contains("model_type") || !c["model_type"].is_string())
    throw_bad_input(fmt::format("{}: config.json has no 'model_type'", path));
  const std::string mt = c["model_type"];
  for (const auto& a : kArchitectures)
    if (mt == a.model_type) return a.load(path);
  throw_unsupported(fmt::format("{}: model_type '{}' is not an architecture the runtime runs ({})", path, mt,
                                fmt::join(runtime_model_types(), ", ")));
}

}  // namespace selq::runtime
