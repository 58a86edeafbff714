#pragma once
// A scaled-down DeepSeek-V3-family checkpoint that the runtime runs (MLA, a
// dense layer then a MoE layer of routed and shared experts, a byte-level
// tokenizer): what the unit tests of the runtime, the gptq pass and the
// rotation build, each changing what it needs (arch, experts, dtype) before
// pipeline::write_synth_checkpoint.
#include <string>

#include "pipeline/synth.h"
#include "runtime/text/tokenizer.h"

namespace selq::test {

inline pipeline::SynthOptions small_moe_synth(const std::string& arch = "deepseek-v3", int experts = 4) {
  pipeline::SynthOptions so;
  so.arch = arch;
  so.scale = 64;
  so.layers = 2;
  so.experts = experts;
  so.vocab = 320;
  so.extra_files["tokenizer.json"] = runtime::Tokenizer::byte_level_json().dump();
  return so;
}

}  // namespace selq::test
