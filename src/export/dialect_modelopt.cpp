// NVIDIA ModelOpt dialect (docs/FORMAT_RULES.md §3; docs/ENGINE_RULES.md §3 and
// §7 rule 6). Bare § numbers below are sections of docs/ENGINE_RULES.md.
//
// Config shape choices, each with the rule it satisfies:
// - Two files say the same thing: hf_quant_config.json {producer,
//   quantization {quant_algo, kv_cache_quant_algo: null, group_size,
//   exclude_modules[, quantized_layers]}} (group_size, kv_cache_quant_algo
//   and exclude_modules always present: required for NVFP4, §3.1), and
//   config.json quantization_config {quant_method "modelopt", quant_algo,
//   ignore, kv_cache_scheme null, group_size[, quantized_layers]}.
// - quant_algo: FP8 (per-tensor weight, static per-tensor input),
//   FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO (128x128 blocks; vLLM runs it with
//   dynamic per-token-group-128 input, so that is the selq act mode), NVFP4,
//   W4A16_NVFP4, MXFP8; several algos -> MIXED_PRECISION with
//   quantized_layers, whose entries may only be FP8, NVFP4, W4A16_NVFP4,
//   MXFP8 (§3.3). group_size is 16 for NVFP4 (vLLM takes the first NVFP4
//   entry's), 32 for MXFP8.
// - quantized_layers keys: exact checkpoint names (vLLM's fused-shard step
//   finds q/k/v and gate/up), and the `...mlp.experts` module for routed
//   experts (the direct key, §3.3 step 1; §7 rule 6 "the MoE parent included").
// - exclusions: vLLM matches them as SUBSTRINGS of the module name (§3.2
//   step 2), so entries are full dotted names, float experts are excluded
//   by their `...mlp.experts` module (step 1 and 2 both hit it), and an
//   entry that is a substring of a quantized module is dropped when the
//   engine never quantizes it anyway (the MoE router `mlp.gate` would
//   otherwise exclude `mlp.gate_up_proj`) or rejected otherwise.
//   Heads with no stored weight (a tied lm_head) are excluded too: vLLM
//   builds them with quant_config (docs/ENGINE_RULES.md, "Tied heads").
// Tensor names: weight, weight_scale, weight_scale_2 (NVFP4 amax/(6*448),
// multiplied in: ModelOpt convention), input_scale. FP8 per-channel scales
// are F32 [out] as vLLM's ModelOptFp8PcPtLinearMethod allocates them.
#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"
#include "export/dialect_internal.h"
#include "export/module_names.h"

namespace selq::exporter::detail {

using quant::ActMode;
using quant::OutRole;
using quant::SchemeKind;
using quant::SchemeSpec;
using nlohmann::json;

namespace {

constexpr const char* kHfQuantConfig = "hf_quant_config.json";

// ModelOpt's quantization algorithms, one row each: the scheme kind and
// activation mode it stores. A scheme no row matches cannot be written.
struct Algo {
  const char* name;  // quant_algo
  SchemeKind kind;
  ActMode act;
  int block;       // square weight block the algorithm requires; 0: any
  int group_size;  // the config's group_size; 0: none
  bool mixable;    // may be an entry of MIXED_PRECISION's quantized_layers (§3.3)
};

constexpr Algo kAlgos[] = {
    {"FP8", SchemeKind::FP8Tensor, ActMode::FP8StaticTensor, 0, 0, true},
    {"FP8_PER_CHANNEL_PER_TOKEN", SchemeKind::FP8Channel, ActMode::FP8PerToken, 0, 0, false},
    {"FP8_PB_WO", SchemeKind::FP8Block, ActMode::FP8PerTokenGroup128, 128, 0, false},
    {"NVFP4", SchemeKind::NVFP4, ActMode::NVFP4, 0, 16, true},
    {"W4A16_NVFP4", SchemeKind::NVFP4, ActMode::None, 0, 16, true},
    {"MXFP8", SchemeKind::MXFP8, ActMode::MXFP8Dynamic, 0, 32, true},
};

const Algo* algo_of(const SchemeSpec& s) {
  for (const auto& a : kAlgos)
    if (a.kind == s.kind && a.act == s.act && (a.block == 0 || (s.block_rows == a.block && s.block_cols == a.block)))
      return &a;
  return nullptr;
}

std::string producer_version() {
#ifdef SELQ_VERSION
  return SELQ_VERSION;
#else
  return "0";
#endif
}

void modelopt_check(const SchemeSpec& s) {
  if (!algo_of(s)) {
    unsupported(Dialect::ModelOpt, s,
                "ModelOpt's algorithms are FP8 (static per-tensor input), FP8_PER_CHANNEL_PER_TOKEN, "
                "FP8_PB_WO (128x128, group-128 input), NVFP4, W4A16_NVFP4 and MXFP8 (dynamic input)");
  }
}

std::string modelopt_suffix(const SchemeSpec&, OutRole role) {
  switch (role) {
    case OutRole::Weight: return "weight";
    case OutRole::Scale: return "weight_scale";
    case OutRole::GlobalScale: return "weight_scale_2";
    case OutRole::InputScale: return "input_scale";
    case OutRole::ZeroPoint:
    case OutRole::WeightShape: break;
  }
  throw_unsupported("the modelopt dialect has no zero-point or weight_shape tensors");
}

json modelopt_scheme_json(const SchemeSpec& s) {
  const Algo* a = algo_of(s);
  json out = {{"quant_algo", a ? a->name : ""}};
  if (a && a->group_size) out["group_size"] = a->group_size;
  return out;
}

// Every module's algorithm, in the order they first appear; more than one is
// MIXED_PRECISION, which only some algorithms may join.
std::vector<const Algo*> distinct_algos(const std::vector<SchemeGroup>& groups) {
  std::vector<const Algo*> algos;
  for (const auto& g : groups) {
    const Algo* a = algo_of(g.spec);
    if (std::find(algos.begin(), algos.end(), a) == algos.end()) algos.push_back(a);
  }
  if (algos.size() > 1)
    for (const Algo* a : algos)
      if (!a->mixable)
        throw_unsupported(fmt::format("the modelopt dialect cannot mix {} with other algorithms: MIXED_PRECISION "
                                      "entries may only be FP8, NVFP4, W4A16_NVFP4 or MXFP8", a->name));
  return algos;
}

// MIXED_PRECISION's quantized_layers (one entry per module, routed experts by
// their parent) and the group_size vLLM takes: its first NVFP4 entry's.
json mixed_quantized_layers(const std::vector<SchemeGroup>& groups, json& group_size) {
  json layers = json::object();
  for (const auto& g : groups) {
    const Algo* a = algo_of(g.spec);
    if (group_size.is_null() && a->kind == SchemeKind::NVFP4) group_size = a->group_size;
    const json entry = modelopt_scheme_json(g.spec);
    for (const auto& m : g.modules) {
      auto p = experts_parent(m);
      layers[p ? *p : m] = entry;
    }
  }
  return layers;
}

// exclude_modules: the float modules (and unstored tied heads: vLLM builds a
// tied head as a quantized ParallelLMHead unless excluded, and then has no
// scales to load for it; docs/ENGINE_RULES.md, "Tied heads"). vLLM matches
// exclusions as substrings of the engine modules that stay quantized, so an
// entry inside one of their names cannot be written.
std::vector<std::string> modelopt_exclusions(const ConfigInput& in, const std::vector<std::string>& all) {
  std::vector<std::string> quantized_engine_names;
  std::map<std::string, bool> is_float;
  for (const auto& m : in.linear_modules) is_float[m.module] = !m.scheme;
  for (const auto& em : engine_modules(EngineFamily::Vllm, all)) {
    if (is_float[em.members.front()]) continue;
    quantized_engine_names.push_back(em.name);
    for (const auto& mem : em.members) quantized_engine_names.push_back(mem);
  }
  std::vector<std::string> excl;
  std::set<std::string> seen;
  std::vector<std::string> float_names = float_modules(in);
  float_names.insert(float_names.end(), in.unstored_heads.begin(), in.unstored_heads.end());
  for (const auto& m : float_names) {
    auto p = experts_parent(m);
    std::string entry = p ? *p : m;
    if (!seen.insert(entry).second) continue;
    bool overlaps = std::any_of(quantized_engine_names.begin(), quantized_engine_names.end(),
                                [&](const std::string& q) { return q.find(entry) != std::string::npos; });
    if (overlaps) {
      if (engine_never_quantizes(entry)) continue;
      throw_unsupported(fmt::format("the modelopt dialect cannot exclude '{}': vLLM matches exclusions as "
                                    "substrings and the name is part of a quantized module's name",
                                    entry));
    }
    excl.push_back(entry);
  }
  return excl;
}

ConfigOutput modelopt_build(const ConfigInput& in) {
  auto groups = group_by_scheme(in, false);
  if (groups.empty()) throw_bad_input("the modelopt dialect needs at least one quantized module");
  const std::vector<const Algo*> algos = distinct_algos(groups);
  const bool mixed = algos.size() > 1;
  json group_size = nullptr;
  json quantized_layers;
  if (mixed)
    quantized_layers = mixed_quantized_layers(groups, group_size);
  else if (algos.front()->group_size)
    group_size = algos.front()->group_size;
  const std::vector<std::string> excl = modelopt_exclusions(in, all_module_names(in));
  const std::string algo = mixed ? "MIXED_PRECISION" : algos.front()->name;
  json quantization = {{"quant_algo", algo},
                       {"kv_cache_quant_algo", nullptr},
                       {"group_size", group_size},
                       {"exclude_modules", excl}};
  json qc = {{"quant_method", "modelopt"},
             {"quant_algo", algo},
             {"ignore", excl},
             {"kv_cache_scheme", nullptr},
             {"group_size", group_size}};
  if (mixed) {
    quantization["quantized_layers"] = quantized_layers;
    qc["quantized_layers"] = quantized_layers;
  }
  json hf = {{"producer", {{"name", "selq"}, {"version", producer_version()}}}, {"quantization", quantization}};
  return {qc, {{kHfQuantConfig, hf.dump(2)}}};
}

// exclude_modules (or ignore) and the keys of quantized_layers, from
// hf_quant_config's `quantization` object or config.json's own.
std::vector<ConfigModuleEntry> modelopt_module_entries(const json& qc) {
  const json& q = qc.is_object() && qc.contains("quantization") ? qc["quantization"] : qc;
  std::vector<ConfigModuleEntry> entries;
  const bool has_exclude = q.is_object() && q.contains("exclude_modules") && q["exclude_modules"].is_array();
  for (const auto& e : config_strings(q, has_exclude ? "exclude_modules" : "ignore"))
    entries.push_back({"exclude_modules", e});
  if (q.is_object() && q.contains("quantized_layers") && q["quantized_layers"].is_object())
    for (const auto& [k, _] : q["quantized_layers"].items()) entries.push_back({"quantized_layers", k});
  return entries;
}

std::vector<std::string> modelopt_unimplemented(const json& qc) {
  const json& q = qc.is_object() && qc.contains("quantization") ? qc["quantization"] : qc;
  std::vector<std::string> out;
  if (config_sets(q, "kv_cache_quant_algo")) out.push_back("kv_cache_quant_algo: a quantized KV cache");
  if (config_sets(qc, "kv_cache_scheme")) out.push_back("kv_cache_scheme: a quantized KV cache");
  return out;
}

}  // namespace

const DialectOps& modelopt_ops() {
  static const DialectOps ops{.check = modelopt_check,
                              .adapt = f32_scale_adapt,
                              .suffix = modelopt_suffix,
                              .scheme_json = modelopt_scheme_json,
                              .comparable = comparable_as_written,
                              .build = modelopt_build,
                              .module_entries = modelopt_module_entries,
                              .unimplemented_numerics = modelopt_unimplemented,
                              .engines = {Engine::VllmModelOpt},
                              .side_file = kHfQuantConfig};
  return ops;
}

}  // namespace selq::exporter::detail
