#include "recipe/fused_modules.h"

#include <algorithm>

#include "core/expert_name.h"

namespace selq::recipe {

const std::vector<FusedRule>& fused_linear_rules() {
  static const std::vector<FusedRule> rules = {
      {"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
      {"gate_up_proj", {"gate_proj", "up_proj"}},
      {"fused_qkv_a_proj", {"q_a_proj", "kv_a_proj_with_mqa"}},
  };
  return rules;
}

std::string fused_shard_key(std::string_view module) {
  const auto dot = module.rfind('.');
  if (dot == std::string_view::npos) return {};
  const std::string_view parent = module.substr(0, dot), last = module.substr(dot + 1);
  for (const auto& rule : fused_linear_rules())
    if (std::find(rule.shards.begin(), rule.shards.end(), last) != rule.shards.end())
      return std::string(parent) + "." + rule.fused;
  // w1/w3 directly under a routed expert's own prefix ("...experts.<digits>").
  if (last == "w1" || last == "w3")
    if (const auto e = parse_routed_expert(parent); e && e->rest.empty()) return std::string(parent) + ".w13";
  return {};
}

}  // namespace selq::recipe
