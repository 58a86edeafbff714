#include "planner/units.h"

#include <map>

#include "core/error.h"
#include "export/module_names.h"
#include "pipeline/plan.h"
#include "recipe/recipe.h"

namespace selq::planner {

std::uint64_t DecisionUnit::parameters() const {
  std::uint64_t n = 0;
  for (const auto& m : members) n += shape_numel(m.weight.shape);
  return n;
}

UnitLayout decision_units(const io::Checkpoint& ckpt, exporter::Dialect dialect) {
  UnitLayout layout;
  layout.dialect = dialect;
  layout.model_dtype = io::model_float_dtype(ckpt);

  recipe::Recipe keep_all;
  keep_all.name = "keep-all";
  keep_all.dialect = exporter::dialect_name(dialect);
  std::vector<TensorInfo> infos;
  for (const auto& t : ckpt.tensors()) infos.push_back(t.info);
  auto resolution = recipe::resolve_recipe(keep_all, infos, ckpt.config());

  std::map<std::string, TensorInfo> weight_of;  // decidable module -> its weight
  std::vector<std::string> decidable;
  for (std::size_t i = 0; i < infos.size(); ++i) {
    const auto& d = resolution.decisions[i];
    if (!d.eligible || d.protected_name || d.action != recipe::Action::Keep) continue;
    weight_of.emplace(d.module, infos[i]);
    decidable.push_back(d.module);
  }
  std::uint64_t unit_bytes = 0;
  for (auto& em : exporter::engine_modules(exporter::EngineFamily::Vllm, decidable)) {
    DecisionUnit u;
    u.name = em.name;
    u.layer = recipe::layer_index_of(em.name).value_or(-1);
    u.kind = recipe::layer_relative_kind(em.name);
    for (const auto& m : em.members) {
      u.members.push_back({m, weight_of.at(m)});
      unit_bytes += weight_of.at(m).nbytes();
    }
    layout.units.push_back(std::move(u));
  }
  // Everything else the plan counts as linear stays as it is in every choice.
  pipeline::PlanOptions count_only;
  count_only.build_config = false;  // never written: its bytes are all this needs
  auto plan = pipeline::make_plan(ckpt, keep_all, count_only);
  const auto totals = plan.linear_totals();
  layout.fixed_bytes = totals.bytes - unit_bytes;
  layout.linear_elements = totals.elements;
  return layout;
}

std::vector<std::span<std::uint8_t>> quantize_to_buffer(const quant::SchemeSpec& spec, const TensorView& src,
                                                       std::vector<std::uint8_t>& storage,
                                                       quant::ErrorMetrics& metrics,
                                                       const quant::TensorQuantizeOptions& options) {
  const auto specs = quant::scheme_outputs(spec, src.info->shape);
  std::uint64_t need = 0;
  for (const auto& o : specs) need += dtype_nbytes(o.dtype, shape_numel(o.shape));
  if (storage.size() < need) storage.resize(need);
  std::vector<std::span<std::uint8_t>> outs;
  std::uint64_t off = 0;
  for (const auto& o : specs) {
    const auto n = dtype_nbytes(o.dtype, shape_numel(o.shape));
    outs.emplace_back(storage.data() + off, n);
    off += n;
  }
  quant::ErrorMetrics em;
  quant::quantize_weight(spec, src, outs, em, options);
  metrics.merge(em);
  return outs;
}

quant::SchemeSpec dialect_spec(const UnitLayout& layout, const Candidate& candidate) {
  return exporter::adapt_scheme_for_dialect(layout.dialect, *candidate.spec, layout.model_dtype);
}

std::optional<std::uint64_t> unit_cost(const UnitLayout& layout, const DecisionUnit& unit, const Candidate& candidate) {
  std::uint64_t bytes = 0;
  if (!candidate.spec) {
    for (const auto& m : unit.members) bytes += m.weight.nbytes();
    return bytes;
  }
  const quant::SchemeSpec spec = dialect_spec(layout, candidate);
  // The experts of a layer have a few distinct shapes among hundreds of members.
  std::map<Shape, std::uint64_t> per_shape;
  try {
    for (const auto& m : unit.members) {
      auto [it, fresh] = per_shape.emplace(m.weight.shape, 0);
      if (fresh) {
        for (const auto& o : quant::scheme_outputs(spec, m.weight.shape))
          it->second += dtype_nbytes(o.dtype, shape_numel(o.shape));
        if (auto a = quant::activation_scale_output(spec, m.weight.shape))
          it->second += dtype_nbytes(a->dtype, shape_numel(a->shape));
      }
      bytes += it->second;
    }
  } catch (const Error&) {
    return std::nullopt;
  }
  return bytes;
}

}  // namespace selq::planner
