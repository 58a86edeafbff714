#pragma once
// Which checkpoint modules a serving engine loads as one module (docs/ENGINE_RULES.md
// §1.2-§1.3): the one table. Members of one fused module need one scheme
// (recipe resolution) and, in NVFP4, one global scale (the plan's groups);
// export/module_names builds the engines' module lists from the same rules.
#include <string>
#include <string_view>
#include <vector>

namespace selq::recipe {

struct FusedRule {
  std::string fused;                // vLLM's module name (SGLang renames fused_qkv_a_proj)
  std::vector<std::string> shards;  // last components of the checkpoint modules
};

// The fused linear modules: q/k/v -> qkv_proj, gate/up -> gate_up_proj,
// q_a + kv_a (MLA) -> fused_qkv_a_proj.
const std::vector<FusedRule>& fused_linear_rules();

// The fused module `module` is a shard of, by its name alone:
// "a.self_attn.k_proj" -> "a.self_attn.qkv_proj"; inside a routed expert
// also w1/w3 -> FusedMoE's "a.mlp.experts.3.w13". Empty when it is none.
std::string fused_shard_key(std::string_view module);

}  // namespace selq::recipe
