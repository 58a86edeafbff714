// Plan serialization (the JSON `quantize` and scripts consume) and the human
// summary printed by `selq plan`.
#include <map>

#include <fmt/format.h>

#include "core/format_bytes.h"

#include "pipeline/module_names.h"
#include "pipeline/plan.h"

namespace selq::pipeline {

namespace {

const char* action_name(recipe::Action a) {
  switch (a) {
    case recipe::Action::Keep: return "keep";
    case recipe::Action::Quantize: return "quantize";
    case recipe::Action::PassThrough: return "pass-through";
    case recipe::Action::Requantize: return "requantize";
    case recipe::Action::Consumed: return "consumed";
  }
  return "?";
}


// Label of what a tensor became: the scheme name, "bf16 (kept)", ...
std::string tensor_label(const PlannedTensor& t) {
  if (t.scheme) return t.scheme->name();
  if (t.action == recipe::Action::PassThrough) return fmt::format("{} (pre-quantized)", dtype_name(t.source_info.dtype));
  return fmt::format("{} (kept)", dtype_name(t.source_info.dtype));
}

}  // namespace

nlohmann::json Plan::to_json() const {
  nlohmann::json j;
  j["source"] = source;
  j["recipe"] = recipe_path;
  j["dialect"] = exporter::dialect_name(dialect);
  j["source_bytes"] = source_bytes();
  j["output_bytes"] = output_bytes();
  j["bits_per_weight"] = bits_per_weight();
  j["in_place_extra_bytes"] = largest_output_shard_bytes();
  j["warnings"] = warnings;
  nlohmann::json per_scheme = nlohmann::json::object();
  nlohmann::json ts = nlohmann::json::array();
  for (const auto& t : tensors) {
    nlohmann::json e;
    e["source"] = t.source;
    e["source_dtype"] = dtype_name(t.source_info.dtype);
    e["source_shape"] = t.source_info.shape;
    e["action"] = action_name(t.action);
    if (t.scheme) e["scheme"] = t.scheme->name();
    if (!t.fused_group.empty()) e["fused_group"] = t.fused_group;
    if (t.input_amax) e["input_amax"] = *t.input_amax;
    if (t.stored) {
      e["requantize_from"] = t.stored->scheme.name();
      e["requantize_inputs"] = t.stored->tensors;
    }
    nlohmann::json outs = nlohmann::json::array();
    for (const auto& o : t.outputs)
      outs.push_back({{"name", o.info.name}, {"dtype", dtype_name(o.info.dtype)}, {"shape", o.info.shape}});
    e["outputs"] = std::move(outs);
    ts.push_back(std::move(e));
    const std::string label = tensor_label(t);
    auto& s = per_scheme[label];
    if (s.is_null()) s = nlohmann::json::object();
    s["count"] = s.value("count", 0) + 1;
    s["source_bytes"] = s.value("source_bytes", std::uint64_t{0}) + t.in_bytes();
    s["output_bytes"] = s.value("output_bytes", std::uint64_t{0}) + t.out_bytes();
  }
  j["per_scheme"] = std::move(per_scheme);
  j["tensors"] = std::move(ts);
  nlohmann::json sh = nlohmann::json::array();
  for (const auto& s : shards) {
    std::vector<std::string> names;
    for (auto i : s.tensors) names.push_back(tensors[i].source);
    sh.push_back({{"name", s.name}, {"sources", std::move(names)}});
  }
  j["shards"] = std::move(sh);
  nlohmann::json mods = nlohmann::json::array();
  for (const auto& m : linear_modules)
    mods.push_back({{"module", m.module},
                    {"scheme", m.scheme ? nlohmann::json(m.scheme->name()) : nlohmann::json(nullptr)},
                    {"preexisting", m.preexisting}});
  j["linear_modules"] = mods;
  return j;
}

std::string format_plan(const Plan& plan) {
  std::string out;
  out += fmt::format("source:  {}\nrecipe:  {}\ndialect: {}\n\n", plan.source, plan.recipe_path,
                     exporter::dialect_name(plan.dialect));
  // Per-scheme table.
  struct Row { std::size_t count = 0; std::uint64_t in = 0, out = 0; };
  std::map<std::string, Row> rows;
  for (const auto& t : plan.tensors) {
    auto& r = rows[tensor_label(t)];
    ++r.count;
    r.in += t.in_bytes();
    r.out += t.out_bytes();
  }
  out += fmt::format("{:<28} {:>7} {:>12} {:>12}\n", "format", "tensors", "before", "after");
  for (const auto& [label, r] : rows)
    out += fmt::format("{:<28} {:>7} {:>12} {:>12}\n", label, r.count, format_bytes(r.in), format_bytes(r.out));
  out += fmt::format("\nsize: {} -> {} ({:.1f}%), {:.3f} bits per linear weight, {} output shard(s)\n",
                     format_bytes(plan.source_bytes()), format_bytes(plan.output_bytes()),
                     plan.source_bytes() ? 100.0 * static_cast<double>(plan.output_bytes()) /
                                               static_cast<double>(plan.source_bytes())
                                         : 0.0,
                     plan.bits_per_weight(), plan.shards.size());
  out += fmt::format("in place: needs up to {} free (the largest rewritten shard) besides the checkpoint\n",
                     format_bytes(plan.largest_output_shard_bytes()));

  // Per-layer map: for each layer, which projection kind got which format.
  std::map<int, std::map<std::string, std::string>> layers;
  for (const auto& m : plan.linear_modules) {
    auto layer = layer_index_of(m.module);
    if (!layer) continue;
    std::string label = m.scheme ? m.scheme->name() : (m.preexisting ? "pre-quantized" : "float");
    layers[*layer][layer_relative_kind(m.module)] = label;
  }
  if (!layers.empty()) {
    out += "\nper layer:\n";
    std::map<std::string, std::string> previous;
    int run_start = -1, last = -1;
    auto flush = [&](int from, int to) {
      if (from < 0) return;
      out += from == to ? fmt::format("  layer {}:", from) : fmt::format("  layers {}-{}:", from, to);
      for (const auto& [kind, label] : previous) out += fmt::format(" {}={}", kind, label);
      out += "\n";
    };
    for (const auto& [layer, kinds] : layers) {
      if (kinds != previous || layer != last + 1) {
        flush(run_start, last);
        previous = kinds;
        run_start = layer;
      }
      last = layer;
    }
    flush(run_start, last);
  }
  for (const auto& w : plan.warnings) out += fmt::format("warning: {}\n", w);
  return out;
}

}  // namespace selq::pipeline
