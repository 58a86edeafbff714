#include "planner/constraints.h"

#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "recipe/recipe.h"

namespace selq::planner {

std::vector<std::set<std::string>> forbidden_candidates(const io::Checkpoint& ckpt, const UnitLayout& layout,
                                                        const std::vector<Candidate>& candidates,
                                                        const ServingContext& serving) {
  std::vector<std::set<std::string>> out(layout.units.size());
  if (!serving.constrains()) return out;
  // The constraint depends on the layer (MLA or not), so each trial resolves
  // the unit's whole layer, with one rule that gives the unit the candidate.
  std::map<int, std::vector<TensorInfo>> by_layer;  // layer index (-1: none) -> its tensors
  for (const auto& t : ckpt.tensors()) by_layer[recipe::layer_index_of(t.info.name).value_or(-1)].push_back(t.info);
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    const auto& unit = layout.units[u];
    const auto& layer_tensors = by_layer[unit.layer];
    for (const auto& c : candidates) {
      if (!c.spec || c.spec->act == quant::ActMode::None) continue;  // only activation quantization is constrained
      recipe::Recipe r;
      r.name = "constraint-probe";
      r.arch = serving.arch;
      r.dialect = exporter::dialect_name(layout.dialect);
      r.fp8_kv_cache = serving.fp8_kv_cache;
      r.fp8_prefill_query = serving.fp8_prefill_query;
      recipe::Rule rule;
      const std::string nested = unit.name + ".";
      if (unit.members.size() > 1 && unit.members.front().module.starts_with(nested))
        rule.match.push_back({nested + "*", {}});  // all experts of a layer: one glob, not hundreds
      else
        for (const auto& m : unit.members) rule.match.push_back({m.module, {}});
      rule.scheme = *c.spec;
      r.rules.push_back(std::move(rule));
      try {
        recipe::resolve_recipe(r, layer_tensors, ckpt.config());
      } catch (const Error&) {
        out[u].insert(c.id);
      }
    }
  }
  return out;
}

}  // namespace selq::planner
