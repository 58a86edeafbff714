// Plan serialization (the JSON `quantize` and scripts consume) and the human
// summary printed by `selq plan`.
#include <algorithm>
#include <functional>
#include <map>
#include <string_view>

#include <fmt/format.h>

#include "core/format_bytes.h"

#include "recipe/recipe.h"
#include "pipeline/plan.h"
#include "quant/rounding_traits.h"

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


// A scheme's label with its rounding when not nearest ("nvfp4+mse").
std::string scheme_label(const quant::SchemeSpec& s) {
  if (s.rounding.value == quant::Rounding::Nearest) return s.name();
  return fmt::format("{}+{}", s.name(), quant::rounding_name(s.rounding.value));
}

// Label of what a tensor became: the scheme name, "bf16 (kept)", ...
std::string tensor_label(const PlannedTensor& t) {
  if (t.scheme) return scheme_label(*t.scheme);
  if (t.action == recipe::Action::PassThrough) return fmt::format("{} (pre-quantized)", dtype_name(t.source_info.dtype));
  return fmt::format("{} (kept)", dtype_name(t.source_info.dtype));
}

}  // namespace

namespace {

// Writes one JSON object member by member, each value dumped on its own, so
// that a 70,000-tensor plan is never one nlohmann tree (549 MB RSS for
// `plan --json` of the Kimi-K3 skeleton when it was). The bytes are those of
// nlohmann's dump(indent) of the whole object, given the members in key order.
class ObjectWriter {
 public:
  using Sink = std::function<void(std::string_view)>;
  ObjectWriter(const Sink& out, int indent) : out_(out), indent_(indent) { out_("{"); }
  void member(std::string_view key, const nlohmann::json& value) {
    begin(key);
    put(value, 1);
  }
  // An array member whose elements are made one at a time by `element(i)`.
  void array(std::string_view key, std::size_t n, const std::function<nlohmann::json(std::size_t)>& element) {
    begin(key);
    if (n == 0) {
      out_("[]");
      return;
    }
    out_("[");
    for (std::size_t i = 0; i < n; ++i) {
      if (i) out_(",");
      newline(2);
      put(element(i), 2);
    }
    newline(1);
    out_("]");
  }
  void finish() { out_(indent_ >= 0 && !first_ ? "\n}" : "}"); }

 private:
  std::string pad(int depth) const { return std::string(static_cast<std::size_t>(depth * indent_), ' '); }
  void newline(int depth) {
    if (indent_ < 0) return;
    out_("\n");
    out_(pad(depth));
  }
  void begin(std::string_view key) {
    if (!first_) out_(",");
    first_ = false;
    newline(1);
    out_(nlohmann::json(std::string(key)).dump());
    out_(indent_ >= 0 ? ": " : ":");
  }
  // A value at `depth`: its own lines shifted right (a string's newlines are escaped, so each is a line).
  void put(const nlohmann::json& v, int depth) {
    std::string text = v.dump(indent_);
    if (indent_ > 0) {
      const std::string indent = pad(depth);
      std::string shifted;
      shifted.reserve(text.size());
      for (char c : text) {
        shifted += c;
        if (c == '\n') shifted += indent;
      }
      text.swap(shifted);
    }
    out_(text);
  }
  const Sink& out_;
  int indent_;
  bool first_{true};
};

nlohmann::json tensor_json(const PlannedTensor& t) {
  nlohmann::json e;
  e["source"] = t.source;
  e["source_dtype"] = dtype_name(t.source_info.dtype);
  e["source_shape"] = t.source_info.shape;
  e["action"] = action_name(t.action);
  if (t.scheme) e["scheme"] = t.scheme->name();
  if (t.scheme && t.scheme->rounding.value != quant::Rounding::Nearest)
    e["rounding"] = quant::rounding_name(t.scheme->rounding.value);
  if (!t.fused_group.empty()) e["fused_group"] = t.fused_group;
  if (t.input_amax) e["input_amax"] = *t.input_amax;
  if (t.stored) {
    e["requantize_from"] = t.stored->scheme.name();
    if (t.exact_from_mxfp4) e["exact"] = "power-of-two NVFP4 scales keep every MXFP4 value";
    e["requantize_inputs"] = t.stored->tensors;
  }
  nlohmann::json outs = nlohmann::json::array();
  for (const auto& o : t.outputs)
    outs.push_back({{"name", o.info.name}, {"dtype", dtype_name(o.info.dtype)}, {"shape", o.info.shape}});
  e["outputs"] = std::move(outs);
  return e;
}

}  // namespace

void Plan::write_json(const std::function<void(std::string_view)>& out, int indent) const {
  nlohmann::json per_scheme = nlohmann::json::object();
  for (const auto& t : tensors) {
    auto& s = per_scheme[tensor_label(t)];
    if (s.is_null()) s = nlohmann::json::object();
    s["count"] = s.value("count", 0) + 1;
    s["source_bytes"] = s.value("source_bytes", std::uint64_t{0}) + t.in_bytes();
    s["output_bytes"] = s.value("output_bytes", std::uint64_t{0}) + t.out_bytes();
  }
  ObjectWriter w(out, indent);  // members in key order, as nlohmann's objects print them
  w.member("bits_per_weight", bits_per_weight());
  w.member("dialect", exporter::dialect_name(dialect));
  w.member("in_place_extra_bytes", largest_output_shard_bytes());
  w.array("linear_modules", linear_modules.size(), [&](std::size_t i) {
    const auto& m = linear_modules[i];
    return nlohmann::json{{"module", m.module},
                          {"scheme", m.scheme ? nlohmann::json(m.scheme->name()) : nlohmann::json(nullptr)},
                          {"preexisting", m.preexisting}};
  });
  w.member("output_bytes", output_bytes());
  w.member("per_scheme", per_scheme);
  w.member("recipe", recipe_path);
  w.array("shards", shards.size(), [&](std::size_t i) {
    std::vector<std::string> names;
    for (auto k : shards[i].tensors) names.push_back(tensors[k].source);
    return nlohmann::json{{"name", shards[i].name}, {"sources", std::move(names)}};
  });
  w.member("source", source);
  w.member("source_bytes", source_bytes());
  w.array("tensors", tensors.size(), [&](std::size_t i) { return tensor_json(tensors[i]); });
  w.member("warnings", warnings);
  w.finish();
}

std::string Plan::json_text(int indent) const {
  std::string s;
  write_json([&s](std::string_view part) { s += part; }, indent);
  return s;
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
    auto layer = recipe::layer_index_of(m.module);
    if (!layer) continue;
    std::string label = m.scheme ? scheme_label(*m.scheme) : (m.preexisting ? "pre-quantized" : "float");
    layers[*layer][recipe::layer_relative_kind(m.module)] = label;
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
  const auto exact = std::count_if(plan.tensors.begin(), plan.tensors.end(),
                                   [](const PlannedTensor& t) { return t.exact_from_mxfp4; });
  if (exact > 0)
    out += fmt::format("exact: {} MXFP4 tensor(s) re-quantized to NVFP4 with power-of-two scales, every value kept "
                       "(where a tensor's block exponents span at most 18 binades)\n",
                       exact);
  for (const auto& w : plan.warnings) out += fmt::format("warning: {}\n", w);
  return out;
}

}  // namespace selq::pipeline
