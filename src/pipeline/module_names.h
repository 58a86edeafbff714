#pragma once
// Name helpers shared by plan, inspect and the planner: layer indices and a
// projection's name within its layer. (Fused modules: recipe/fused_modules.h.)
#include <optional>
#include <string>

namespace selq::pipeline {

// Layer index from "...layers.N..." (nullopt if none).
std::optional<int> layer_index_of(const std::string& name);
// The projection's short name relative to its layer: "self_attn.o_proj",
// "mlp.experts.*.up_proj" (expert index replaced by *), "embed_tokens".
std::string layer_relative_kind(const std::string& module);

}  // namespace selq::pipeline
