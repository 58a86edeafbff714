// AMD Quark dialect (docs/FORMAT_RULES.md §6; docs/ENGINE_RULES.md §2, §4, §7).
// Bare § numbers below are sections of docs/ENGINE_RULES.md.
//
// Config shape choices, each with the rule it satisfies:
// - Always written: `export` {kv_cache_group: [], pack_method "reorder",
//   weight_format "real_quantized", min_kv_scale 0.0} (vLLM raises without
//   it, §2.1), `layer_type_quant_config: {}` (dead in vLLM, §2.2 step 3, §7 rule 5),
//   `layer_quant_config`, `exclude` (a list), `global_quant_config`,
//   quant_mode, version, algo_config null, kv_cache_quant_config {}.
// - global_quant_config = the scheme used by the most modules, except that a
//   non-FP4 scheme is preferred when excluded self_attn linears exist (vLLM
//   re-quantizes those to MXFP4 online for deepseek_v3 models whose global
//   weight dtype is fp4, §2.2 step 1).
// - layer_quant_config: one key per module whose scheme differs from global,
//   keyed by the exact checkpoint module name; routed experts get one key,
//   the `...mlp.experts` module itself (the name vLLM, SGLang and ATOM look
//   up, §2.2, §4). vLLM matches a key without `*` when the module name is a
//   SUBSTRING of the key and JSON object order is not kept by every writer,
//   so a key that contains another looked-up name with a different scheme
//   (`...mlp.gate` inside `...mlp.gate_proj`) gets a trailing `*`: fnmatch
//   then requires the whole name, and SGLang (always fnmatch) and ATOM read
//   it the same way. The post-build check resolves every module with all
//   three engines.
// - exclude: exact checkpoint names of every float linear, MTP layers and
//   lm_head included; float experts are listed child by child (vLLM's
//   check_children, SGLang's per-expert names, ATOM's MoE children all match
//   them, §2.2 step 1, §4). No globs, no `re:` (§7 rule 2).
// - Fused shards and the experts of one MoE layer share one scheme (§2.2
//   deep_compare, §7 rules 3-4), enforced before building.
// Schemes (§2.3): MXFP4 weight fp4/per_group/32/e8m0 with dynamic fp4
// input (W4A4), none, or fp8 per-tensor input; FP8 PTPC = per_channel weight
// + per_channel dynamic input; FP8 per-tensor; FP8 per_block [128,128] with
// per_group 128 dynamic input; NVFP4 as 2-entry lists. Tensor names: weight,
// weight_scale (block/channel/tensor), weight_scale_2 (NVFP4 global, which
// vLLM QuarkNVFP4 multiplies in: ModelOpt convention). FP8 channel scales
// are F32 [out].
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>

#include "core/error.h"
#include "export/dialect_internal.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "quant/scheme_traits.h"

namespace selq::exporter::detail {

using quant::ActMode;
using quant::OutRole;
using quant::SchemeKind;
using quant::SchemeSpec;
using nlohmann::json;

namespace {

std::string scale_mode(ScaleRule r) {
  switch (r) {
    case ScaleRule::Even: return "even";
    case ScaleRule::Floor: return "floor";
    case ScaleRule::Ceil: return "ceil";
    case ScaleRule::RCeil: return "rceil";
  }
  return "even";
}

json spec(const std::string& dtype, const std::string& qscheme, bool dynamic) {
  return {{"dtype", dtype},       {"is_dynamic", dynamic}, {"qscheme", qscheme}, {"ch_axis", nullptr},
          {"group_size", nullptr}, {"symmetric", true},     {"round_method", "half_even"},
          {"scale_type", "float"}, {"scale_format", nullptr}, {"scale_calculation_mode", nullptr},
          {"mx_element_dtype", nullptr}, {"observer_cls", nullptr}, {"is_scale_quant", false}};
}

json mx_spec(const std::string& dtype, bool dynamic, ScaleRule rule) {
  json s = spec(dtype, "per_group", dynamic);
  s["ch_axis"] = -1;
  s["group_size"] = 32;
  s["symmetric"] = nullptr;
  // round_method stays spec()'s "half_even" (the elements' RNE): Quark's RoundType
  // has no "even", and its QConfig.from_dict raised KeyError on it.
  s["scale_format"] = "e8m0";
  s["scale_calculation_mode"] = scale_mode(rule);
  s["observer_cls"] = "PerBlockMXObserver";
  return s;
}

json fp8(const std::string& qscheme, bool dynamic) {
  json s = spec("fp8_e4m3", qscheme, dynamic);
  s["observer_cls"] = qscheme == "per_channel" ? "PerChannelMinMaxObserver" : "PerTensorMinMaxObserver";
  return s;
}

json nvfp4_pair(bool dynamic) {
  json block = spec("fp4", "per_group", dynamic);
  block["ch_axis"] = -1;
  block["group_size"] = 16;
  block["scale_format"] = "fp8_e4m3";
  block["observer_cls"] = "PerBlockNVFP4Observer";
  json second = fp8("per_tensor", false);
  second["is_scale_quant"] = true;
  return json::array({block, second});
}

json fp8_channel_weight(const SchemeSpec&) {
  json w = fp8("per_channel", false);
  w["ch_axis"] = 0;
  return w;
}

json fp8_block_weight(const SchemeSpec& s) {
  json w = fp8("per_block", false);
  w["block_size"] = {s.block_rows, s.block_cols};
  w["observer_cls"] = nullptr;
  return w;
}

std::string block_128_problem(const SchemeSpec& s) {
  if (s.block_rows != 128 || s.block_cols != 128) return "QuarkW8A8Fp8PerBlock takes block_size [128,128] only";
  return {};
}

using quant::act_bit;
constexpr unsigned kFp8TensorInputs = act_bit(ActMode::FP8DynamicTensor) | act_bit(ActMode::FP8StaticTensor);

// How Quark writes each scheme kind: one row per SchemeKind, in enum order
// (checked below). A row without a weight spec is refused with `why`.
struct QuarkRow {
  SchemeKind kind;
  json (*weight)(const SchemeSpec&);  // the layer config's `weight`; nullptr: vLLM's Quark loads no such weight
  unsigned inputs;                    // the activation modes the loader runs it with (act_bit)
  const char* why;                    // the refusal when the scheme's mode is not one of them
  std::string (*problem)(const SchemeSpec&);  // options the loader refuses; nullptr: none
};

constexpr std::array<QuarkRow, quant::kSchemeKindCount> kRows = {{
    {SchemeKind::MXFP4, [](const SchemeSpec& s) { return mx_spec("fp4", false, s.scale_rule); },
     act_bit(ActMode::None) | act_bit(ActMode::MXFP4Dynamic) | kFp8TensorInputs,
     "vLLM QuarkOCP_MX takes weight-only, dynamic MXFP4 or FP8 per-tensor input", nullptr},
    {SchemeKind::MXFP8, nullptr, 0, "vLLM's Quark OCP MX path takes fp4/fp6 elements only", nullptr},
    {SchemeKind::NVFP4, [](const SchemeSpec&) { return nvfp4_pair(false); }, act_bit(ActMode::NVFP4),
     "QuarkNVFP4 needs NVFP4 activations (the 2-entry list form)", nullptr},
    {SchemeKind::FP8Tensor, [](const SchemeSpec&) { return fp8("per_tensor", false); }, kFp8TensorInputs,
     "QuarkW8A8Fp8 with a per-tensor weight needs per-tensor FP8 activations", nullptr},
    {SchemeKind::FP8Channel, fp8_channel_weight, act_bit(ActMode::FP8PerToken) | kFp8TensorInputs,
     "QuarkW8A8Fp8 needs FP8 activations (per-token dynamic = PTPC, or per-tensor)", nullptr},
    {SchemeKind::FP8Block, fp8_block_weight, act_bit(ActMode::FP8PerTokenGroup128),
     "QuarkW8A8Fp8PerBlock needs dynamic per_group 128 FP8 input", block_128_problem},
    {SchemeKind::IntChannel, nullptr, 0,
     "vLLM's only Quark int scheme is W8A8 int8 with int8 activations, which selq has no activation mode for",
     nullptr},
    {SchemeKind::IntGroup, nullptr, 0,
     "vLLM's only Quark int scheme is W8A8 int8 with int8 activations, which selq has no activation mode for",
     nullptr},
    {SchemeKind::FP8ChannelE8M0, nullptr, 0,
     "QuarkW8A8Fp8 loads per-channel scales as floats; no engine loads E8M0 per-channel FP8 weights yet", nullptr},
}};

static_assert(rows_in_kind_order(kRows), "export/dialect_quark.cpp needs one row per SchemeKind, in enum order");

const QuarkRow& row(const SchemeSpec& s) { return kRows[static_cast<std::size_t>(s.kind)]; }

json input_spec(const SchemeSpec& s) {
  switch (s.act) {
    case ActMode::None: return nullptr;
    case ActMode::MXFP4Dynamic: return mx_spec("fp4", true, s.scale_rule);
    case ActMode::FP8PerToken: {
      json a = fp8("per_channel", true);
      a["ch_axis"] = 1;
      return a;
    }
    case ActMode::FP8StaticTensor: return fp8("per_tensor", false);
    case ActMode::FP8DynamicTensor: return fp8("per_tensor", true);
    case ActMode::FP8PerTokenGroup128: {
      json a = fp8("per_group", true);
      a["ch_axis"] = -1;
      a["group_size"] = 128;
      a["observer_cls"] = nullptr;
      return a;
    }
    case ActMode::NVFP4: return nvfp4_pair(true);
    case ActMode::MXFP8Dynamic: return nullptr;  // only with MXFP8 weights, which quark_check refuses
  }
  return nullptr;
}

void quark_check(const SchemeSpec& s) {
  const QuarkRow& r = row(s);
  check_kind_row(Dialect::Quark, s, r.weight != nullptr, r.problem, r.inputs, r.why);
}

std::string quark_suffix(const SchemeSpec&, OutRole role) {
  switch (role) {
    case OutRole::Weight: return "weight";
    case OutRole::Scale: return "weight_scale";
    case OutRole::GlobalScale: return "weight_scale_2";
    case OutRole::ZeroPoint: return "weight_zero_point";
    case OutRole::InputScale: return "input_scale";
    case OutRole::WeightShape: break;
  }
  throw_unsupported("the quark dialect has no weight_shape tensor");
}

json quark_scheme_json(const SchemeSpec& s) {
  const QuarkRow& r = row(s);
  return {{"weight", r.weight ? r.weight(s) : json(nullptr)}, {"input_tensors", input_spec(s)}, {"output_tensors", nullptr},
          {"bias", nullptr}};
}

// Keys of a Quark quant spec that say how the values were found, not what is
// stored or how an engine loads it (Quark 0.13 writes the last two as well).
constexpr std::array<const char*, 3> kCalibrationOnlyKeys = {"observer_cls", "enable_buffer_reuse",
                                                             "max_input_numel"};

json spec_comparable(json s) {
  if (s.is_array()) {  // NVFP4's two-entry form
    for (auto& e : s) e = spec_comparable(e);
    return s;
  }
  if (!s.is_object()) return s;
  for (const char* k : kCalibrationOnlyKeys) s.erase(k);
  // Written as null by Quark 0.13 for the schemes that have no block.
  if (s.contains("block_size") && s["block_size"].is_null()) s.erase("block_size");
  // A symmetric spec stores no zero point, so its type changes nothing.
  const bool asymmetric = s.contains("symmetric") && s["symmetric"].is_boolean() && !s["symmetric"].get<bool>();
  if (!asymmetric) s.erase("zero_point_type");
  return s;
}

// A layer config as Quark 0.10-0.13 and selq write it, less what does not
// change the numerics; anything else (an unknown key, a value selq does not
// write) still makes it unrecognised.
json quark_comparable(const json& scheme) {
  if (!scheme.is_object()) return scheme;
  json out = scheme;
  out.erase("target_device");
  for (const char* k : {"weight", "input_tensors", "output_tensors", "bias"})
    if (out.contains(k)) out[k] = spec_comparable(out[k]);
  return out;
}

// Keys vLLM matches by substring: star a key that another looked-up name
// (with a different scheme) is a substring of.
void star_conflicting_keys(json& lqc, const ConfigInput& in) {
  // A few schemes across many modules: each scheme's layer config is built once.
  std::vector<std::pair<SchemeSpec, json>> configs;
  auto config_of = [&](const SchemeSpec& s) -> const json* {
    for (const auto& [spec, cfg] : configs)
      if (spec == s) return &cfg;
    return nullptr;
  };
  for (const auto& m : in.linear_modules)
    if (m.scheme && !config_of(*m.scheme)) configs.emplace_back(*m.scheme, quark_scheme_json(*m.scheme));
  std::map<std::string, const json*> want;  // every name vLLM looks up -> its layer config (null = excluded)
  for (const auto& m : in.linear_modules) {
    auto p = experts_parent(m.module);
    std::string name = p ? *p : m.module;
    want[name] = m.scheme ? config_of(*m.scheme) : nullptr;
  }
  json out = json::object();
  for (const auto& [key, cfg] : lqc.items()) {
    bool conflict = false;
    for (const auto& [name, w] : want) {
      if (name == key || !w || engine_never_quantizes(name)) continue;
      if (key.find(name) != std::string::npos && *w != cfg) conflict = true;
    }
    out[conflict ? key + "*" : key] = cfg;
  }
  lqc = out;
}

ConfigOutput quark_build(const ConfigInput& in) {
  auto groups = group_by_scheme(in, false);
  if (groups.empty()) throw_bad_input("the quark dialect needs at least one quantized module");
  bool excluded_attn = false;
  for (const auto& m : float_modules(in)) excluded_attn |= m.find("self_attn") != std::string::npos;
  auto count = [](const SchemeGroup& g) { return g.modules.size(); };
  auto best = std::max_element(groups.begin(), groups.end(),
                               [&](const auto& a, const auto& b) { return count(a) < count(b); });
  if (excluded_attn && best->spec.kind == SchemeKind::MXFP4) {
    auto alt = std::max_element(groups.begin(), groups.end(), [&](const auto& a, const auto& b) {
      bool af = a.spec.kind != SchemeKind::MXFP4, bf = b.spec.kind != SchemeKind::MXFP4;
      return af != bf ? !af : count(a) < count(b);
    });
    if (alt->spec.kind != SchemeKind::MXFP4) best = alt;
  }
  const SchemeSpec global = best->spec;

  json lqc = json::object();
  for (const auto& g : groups) {
    if (g.spec == global) continue;
    json cfg = quark_scheme_json(g.spec);
    for (const auto& m : g.modules) {
      auto p = experts_parent(m);
      lqc[p ? *p : m] = cfg;
    }
  }
  star_conflicting_keys(lqc, in);

  json qc;
  qc["quant_method"] = "quark";
  qc["global_quant_config"] = quark_scheme_json(global);
  qc["layer_quant_config"] = lqc;
  qc["layer_type_quant_config"] = json::object();
  qc["kv_cache_quant_config"] = json::object();
  qc["exclude"] = float_modules(in);
  qc["export"] = {{"kv_cache_group", json::array()},
                  {"pack_method", "reorder"},
                  {"weight_format", "real_quantized"},
                  {"min_kv_scale", 0.0}};
  qc["quant_mode"] = "eager_mode";
  qc["version"] = "0.10";
  qc["algo_config"] = nullptr;
  return {qc, {}};
}

// `exclude` and the keys of layer_quant_config.
std::vector<ConfigModuleEntry> quark_module_entries(const json& qc) {
  std::vector<ConfigModuleEntry> entries;
  for (const auto& e : config_strings(qc, "exclude")) entries.push_back({"exclude", e});
  if (qc.is_object() && qc.contains("layer_quant_config") && qc["layer_quant_config"].is_object())
    for (const auto& [k, _] : qc["layer_quant_config"].items()) entries.push_back({"layer_quant_config", k});
  return entries;
}

std::vector<std::string> quark_unimplemented(const json& qc) {
  std::vector<std::string> out;
  if (config_sets(qc, "kv_cache_quant_config")) out.push_back("kv_cache_quant_config: a quantized KV cache");
  if (config_sets(qc, "softmax_quant_spec")) out.push_back("softmax_quant_spec: quantized attention softmax");
  // AWQ, SmoothQuant and GPTQ leave nothing to do at load time; rotations do.
  if (qc.is_object() && qc.contains("algo_config") && qc["algo_config"].is_array())
    for (const auto& a : qc["algo_config"])
      if (a.is_object() && a.value("name", "").find("rotation") != std::string::npos)
        out.push_back(fmt::format("algo_config '{}': online rotations of activations", a.value("name", "")));
  auto layer_outputs = [&](const std::string& where, const json& layer) {
    if (config_sets(layer, "output_tensors")) out.push_back(where + ".output_tensors: quantized layer outputs");
  };
  if (qc.is_object() && qc.contains("global_quant_config")) layer_outputs("global_quant_config", qc["global_quant_config"]);
  for (const char* table : {"layer_quant_config", "layer_type_quant_config"})
    if (qc.is_object() && qc.contains(table) && qc[table].is_object())
      for (const auto& [k, layer] : qc[table].items()) layer_outputs(fmt::format("{}.{}", table, k), layer);
  return out;
}

}  // namespace

const DialectOps& quark_ops() {
  static const DialectOps ops{.check = quark_check,
                              .adapt = f32_scale_adapt,
                              .suffix = quark_suffix,
                              .scheme_json = quark_scheme_json,
                              .comparable = quark_comparable,
                              .build = quark_build,
                              .module_entries = quark_module_entries,
                              .unimplemented_numerics = quark_unimplemented,
                              .engines = {Engine::VllmQuark, Engine::SglangQuark, Engine::AtomQuark}};
  return ops;
}

}  // namespace selq::exporter::detail
