#pragma once
// Name helpers shared by plan, inspect and verify: module prefixes, layer
// indices and the fused groups engines build from several checkpoint modules.
#include <optional>
#include <string>

namespace selq::pipeline {

// Layer index from "...layers.N..." (nullopt if none).
std::optional<int> layer_index_of(const std::string& name);
// The projection's short name relative to its layer: "self_attn.o_proj",
// "mlp.experts.*.up_proj" (expert index replaced by *), "embed_tokens".
std::string layer_relative_kind(const std::string& module);
// Key of the fused group whose members must share an NVFP4 global scale
// (q/k/v, gate/up, w1/w3 per expert); empty if the module is not in one.
std::string nvfp4_fused_group(const std::string& module);

}  // namespace selq::pipeline
