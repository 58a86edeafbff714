// compressed-tensors dialect (docs/FORMAT_RULES.md §5; docs/ENGINE_RULES.md §1
// and §7). Bare § numbers below are sections of docs/ENGINE_RULES.md.
//
// Config shape choices, each with the rule it satisfies:
// - One config group per distinct scheme ("group_0", "group_1", ...; renamed
//   past any names kept from the source). Targets are the exact checkpoint
//   module names (q_proj, not qkv_proj): vLLM resolves a fused layer through
//   its shards (get_scheme_dict step 2b) and the compressed-tensors library
//   through its fused mapping, and exact names are the one target form both
//   rank first and vLLM remaps for multimodal wrappers (§1.1, §1.3, §7 rule 1).
//   No class targets ("Linear"): they would also catch float layers that an
//   ignore entry misses.
// - Routed experts: when every expert child of one MoE layer is in a list,
//   it becomes one `re:<escaped layer prefix>\.experts\.\d+\.(down_proj|...)$`
//   pattern (full prefix, ends with `$`: §7 rule 2). vLLM probes expert 0 only
//   (§1.2, routed experts), so all experts of a layer must share the scheme,
//   which build_quantization_config enforces (§7 rule 4).
// - `format` per group, and top-level `mixed-precision` when groups use more
//   than one format; otherwise the top level carries the single format.
// - `ignore` lists the exact names of every linear left in float (MTP layers
//   and lm_head included, §5 vllm#54547/#49187 rule), experts compressed as
//   above. vLLM tests ignore before targets and per shard for fused layers.
// - quantization_status "compressed", kv_cache_scheme null,
//   sparsity_config {} (the library parses it), version of the library the
//   layout follows.
// - A source config's groups (already quantized modules) are kept with their
//   own targets; those modules are not listed again. `ignore` is rebuilt from
//   what is really float.
// Tensor names: weight / weight_packed (int pack-quantized, nvfp4, mxfp4),
// weight_scale, weight_global_scale (NVFP4, 448*6/amax: CT convention),
// weight_zero_point, weight_shape. FP8 channel/tensor scales and int scales
// are in the model dtype, channel scales (out,1) (docs/FORMAT_RULES.md §4.3);
// int4 and int8 pack into int32 words (pack-quantized: vLLM loads weight-only
// int only in that format; int-quantized is its W8A8 format).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <memory>
#include <regex>
#include <set>

#include "core/error.h"
#include "export/dialect_internal.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"

namespace selq::exporter::detail {

using quant::ActMode;
using quant::OutRole;
using quant::SchemeKind;
using quant::SchemeSpec;
using nlohmann::json;

namespace {

constexpr const char* kLayoutVersion = "0.12.2";

json fp_args(int bits, const std::string& strategy, json group_size, json dynamic) {
  return {{"num_bits", bits}, {"type", "float"}, {"symmetric", true}, {"group_size", group_size},
          {"strategy", strategy}, {"dynamic", dynamic}};
}

// MXFP4/MXFP8 (weights or dynamic input): groups of 32 with E8M0 scales.
json mx_args(int bits, bool dynamic) {
  json a = fp_args(bits, "group", 32, dynamic);
  a["scale_dtype"] = "torch.uint8";
  return a;
}

// NVFP4: groups of 16 with E4M3 scales under a per-tensor global scale.
json nvfp4_args(json dynamic) {
  json a = fp_args(4, "tensor_group", 16, dynamic);
  a["scale_dtype"] = "torch.float8_e4m3fn";
  return a;
}

json int_args(const SchemeSpec& s) {
  const bool group = s.kind == SchemeKind::IntGroup;
  return {{"num_bits", s.bits},
          {"type", "int"},
          {"symmetric", s.symmetric},
          {"group_size", group ? json(s.group_size) : json(nullptr)},
          {"strategy", group ? "group" : "channel"},
          {"dynamic", false}};
}

std::string int_problem(const SchemeSpec& s) {
  if (s.bits != 4 && s.bits != 8) return "int takes 4 or 8 bits";
  if (s.kind == SchemeKind::IntGroup && s.group_size <= 0) return "group strategy needs a positive group_size";
  return {};
}

// FP8 channel and tensor scales in the model dtype, (out, 1) / [1].
void model_dtype_scales(SchemeSpec& s, DType model_dtype) {
  s.scale_dtype = model_dtype;
  s.scale_keepdim = true;
}

void int_pack_quantized(SchemeSpec& s, DType model_dtype) {
  model_dtype_scales(s, model_dtype);
  s.int_pack_int32 = true;  // weight-only int loads only as pack-quantized
}

constexpr unsigned kFp8Inputs = quant::act_bit(ActMode::None) | quant::act_bit(ActMode::FP8PerToken) |
                                quant::act_bit(ActMode::FP8StaticTensor) | quant::act_bit(ActMode::FP8DynamicTensor);
constexpr const char* kFp8InputsWhy =
    "float-quantized FP8 takes token, tensor (static or dynamic) or no input quantization";

// How compressed-tensors writes each scheme kind: one row per SchemeKind, in
// enum order (checked below). A row without a format is refused with `why`.
struct CtRow {
  SchemeKind kind;
  const char* format;  // config group `format`; nullptr: no compressed-tensors format stores it
  unsigned inputs;     // the activation modes the format runs with (act_bit)
  const char* why;     // the refusal when the scheme's mode is not one of them
  json (*weights)(const SchemeSpec&);
  void (*adapt)(SchemeSpec&, DType model_dtype);  // nullptr: stored as the scheme says
  bool packed;                                    // `weight_packed` (int: when packed into int32)
  std::string (*problem)(const SchemeSpec&);      // options the format refuses; nullptr: none
};

constexpr std::array<CtRow, quant::kSchemeKindCount> kRows = {{
    {SchemeKind::MXFP4, "mxfp4-pack-quantized", quant::act_bit(ActMode::None) | quant::act_bit(ActMode::MXFP4Dynamic),
     "mxfp4-pack-quantized takes weight-only or dynamic MXFP4 input",
     [](const SchemeSpec&) { return mx_args(4, false); }, nullptr, true, nullptr},
    {SchemeKind::MXFP8, "mxfp8-quantized", quant::act_bit(ActMode::None) | quant::act_bit(ActMode::MXFP8Dynamic),
     "mxfp8-quantized takes weight-only or dynamic MXFP8 input",
     [](const SchemeSpec&) { return mx_args(8, false); }, nullptr, false, nullptr},
    {SchemeKind::NVFP4, "nvfp4-pack-quantized", quant::act_bit(ActMode::None) | quant::act_bit(ActMode::NVFP4),
     "vLLM requires NVFP4 weights to have NVFP4 activations or none",
     [](const SchemeSpec&) { return nvfp4_args(false); },
     [](SchemeSpec& s, DType) { s.nvfp = quant::NvfpConvention::CompressedTensors; }, true, nullptr},
    {SchemeKind::FP8Tensor, "float-quantized", kFp8Inputs, kFp8InputsWhy,
     [](const SchemeSpec&) { return fp_args(8, "tensor", nullptr, false); }, model_dtype_scales, false, nullptr},
    {SchemeKind::FP8Channel, "float-quantized", kFp8Inputs, kFp8InputsWhy,
     [](const SchemeSpec&) { return fp_args(8, "channel", nullptr, false); }, model_dtype_scales, false, nullptr},
    {SchemeKind::FP8Block, "float-quantized", quant::act_bit(ActMode::FP8PerTokenGroup128),
     "block FP8 runs with dynamic per-token-group-128 input",
     [](const SchemeSpec& s) {
       json a = fp_args(8, "block", nullptr, false);
       a["block_structure"] = {s.block_rows, s.block_cols};
       return a;
     },
     nullptr, false, nullptr},
    // int: pack-quantized, the weight-only format vLLM's WNA16 loads.
    {SchemeKind::IntChannel, "pack-quantized", quant::act_bit(ActMode::None),
     "selq writes int schemes weight-only (W4A16/W8A16)", int_args, int_pack_quantized, false, int_problem},
    {SchemeKind::IntGroup, "pack-quantized", quant::act_bit(ActMode::None),
     "selq writes int schemes weight-only (W4A16/W8A16)", int_args, int_pack_quantized, false, int_problem},
    {SchemeKind::FP8ChannelE8M0, nullptr, 0,
     "float-quantized FP8 stores float per-channel scales; compressed-tensors has no E8M0 per-channel FP8 format",
     nullptr, nullptr, false, nullptr},
}};

static_assert(rows_in_kind_order(kRows), "export/dialect_ct.cpp needs one row per SchemeKind, in enum order");

const CtRow& row(const SchemeSpec& s) { return kRows[static_cast<std::size_t>(s.kind)]; }

json input_args(const SchemeSpec& s) {
  switch (s.act) {
    case ActMode::None: return nullptr;
    case ActMode::FP8PerToken: return fp_args(8, "token", nullptr, true);
    case ActMode::FP8PerTokenGroup128: return fp_args(8, "group", 128, true);
    case ActMode::FP8StaticTensor: {
      json a = fp_args(8, "tensor", nullptr, false);
      a["observer"] = "minmax";
      return a;
    }
    case ActMode::FP8DynamicTensor: return fp_args(8, "tensor", nullptr, true);
    case ActMode::MXFP4Dynamic: return mx_args(4, true);
    case ActMode::MXFP8Dynamic: return mx_args(8, true);
    case ActMode::NVFP4: {
      json a = nvfp4_args("local");
      a["observer"] = "static_minmax";
      return a;
    }
  }
  return nullptr;
}

void ct_check(const SchemeSpec& s) {
  const CtRow& r = row(s);
  check_kind_row(Dialect::CompressedTensors, s, r.format != nullptr, r.problem, r.inputs, r.why);
}

SchemeSpec ct_adapt(SchemeSpec s, DType model_dtype) {
  if (const auto adapt = row(s).adapt) adapt(s, model_dtype);
  return s;
}

std::string ct_suffix(const SchemeSpec& s, OutRole role) {
  switch (role) {
    case OutRole::Weight: {
      const bool int_kind = s.kind == SchemeKind::IntChannel || s.kind == SchemeKind::IntGroup;
      return row(s).packed || (int_kind && s.int_pack_int32) ? "weight_packed" : "weight";
    }
    case OutRole::Scale: return "weight_scale";
    case OutRole::GlobalScale: return "weight_global_scale";
    case OutRole::ZeroPoint: return "weight_zero_point";
    case OutRole::WeightShape: return "weight_shape";
    case OutRole::InputScale:
      return quant::act_mode_traits(s.act).input_scale == quant::InputScaleKind::NVFP4Global ? "input_global_scale"
                                                                                            : "input_scale";
  }
  return "weight";
}

json ct_scheme_json(const SchemeSpec& s) {
  const CtRow& r = row(s);
  return {{"weights", r.weights ? r.weights(s) : json(nullptr)},
          {"input_activations", input_args(s)},
          {"output_activations", nullptr},
          {"format", r.format ? r.format : "dense"}};
}

// GPTQ's column order, as llm-compressor records it: "static" and "weight"
// (the same ordering) store nothing more and decode as without it; "group"
// and "dynamic" store a g_idx, which selq neither writes nor reads.
bool storage_free_actorder(const json& v) { return v.is_string() && (v == "static" || v == "weight"); }

json ct_comparable(const json& scheme) {
  if (!scheme.is_object()) return scheme;
  json out = json::object();
  for (const char* key : {"weights", "input_activations", "output_activations", "format"}) {
    const auto it = scheme.find(key);
    if (it == scheme.end() || it->is_null()) continue;
    if (!it->is_object()) {
      out[key] = *it;
      continue;
    }
    json args = json::object();
    for (const auto& [k, v] : it->items())
      if (!v.is_null() && k != "observer" && k != "observer_kwargs" && !(k == "actorder" && storage_free_actorder(v)))
        args[k] = v;
    out[key] = std::move(args);
  }
  return out;
}

// compressed-tensors and vLLM match "re:" targets with Python's re.match:
// anchored at the start only. The regex is compiled once per target, not once
// per module it is tried on.
std::function<bool(const std::string&)> ct_target_matcher(const std::string& target) {
  if (!target.starts_with("re:")) return [target](const std::string& module) { return module == target; };
  auto re = std::make_shared<std::regex>(target.substr(3));
  return [re](const std::string& module) {
    return std::regex_search(module, *re, std::regex_constants::match_continuous);
  };
}

// A kept source group must stop naming modules that are quantized anew
// (re-quantized from their stored form): an exact target goes, a pattern
// goes when it matches only such modules, and a pattern that also covers
// modules still stored in the group's scheme cannot be split.
json targets_without_requantized(const std::string& group, const json& targets, const ConfigInput& in) {
  std::vector<std::string> renewed, kept;
  for (const auto& m : in.linear_modules) {
    if (m.preexisting) kept.push_back(m.module);
    else if (m.scheme) renewed.push_back(m.module);
  }
  if (renewed.empty() || !targets.is_array()) return targets;
  json out = json::array();
  for (const auto& t : targets) {
    if (!t.is_string()) {
      out.push_back(t);
      continue;
    }
    const std::string target = t.get<std::string>();
    const auto matches = ct_target_matcher(target);
    const auto hit = std::find_if(renewed.begin(), renewed.end(), matches);
    if (hit == renewed.end()) {
      out.push_back(t);
      continue;
    }
    const auto still = std::find_if(kept.begin(), kept.end(), matches);
    if (still != kept.end())
      throw_bad_input(fmt::format("source config group '{}' target '{}' covers both '{}', which is quantized anew, "
                                  "and '{}', which is kept as stored; re-quantize all the modules it names or none",
                                  group, target, *hit, *still));
  }
  return out;
}

ConfigOutput ct_build(const ConfigInput& in) {
  const json& src = in.source_quantization_config;
  const bool keep_source = keeps_source_ct_groups(src);
  std::vector<std::string> all = all_module_names(in);

  json groups = json::object();
  std::set<std::string> formats;
  if (keep_source) {
    std::string src_format = src.value("format", "");
    for (const auto& [name, g] : src["config_groups"].items()) {
      json copy = g;
      copy["targets"] = targets_without_requantized(name, g.value("targets", json::array()), in);
      if (copy["targets"].empty()) continue;  // every module it named was re-quantized
      if (!copy.contains("format") || copy["format"].is_null()) {
        if (src_format.empty() || src_format == "mixed-precision")
          throw_bad_input(fmt::format("source config group '{}' has no format", name));
        copy["format"] = src_format;
      }
      formats.insert(copy["format"].get<std::string>());
      groups[name] = copy;
    }
  } else {
    for (const auto& m : in.linear_modules) {
      if (m.preexisting && !m.scheme)
        throw_bad_input(fmt::format("module '{}' is marked preexisting but has no scheme and the "
                                    "source has no compressed-tensors config groups", m.module));
    }
  }

  int next = 0;
  for (const auto& g : group_by_scheme(in, keep_source)) {
    std::string name;
    do { name = fmt::format("group_{}", next++); } while (groups.contains(name));
    json entry = ct_scheme_json(g.spec);
    entry["targets"] = compress_expert_names(g.modules, all);
    formats.insert(entry["format"].get<std::string>());
    groups[name] = entry;
  }

  json qc;
  qc["quant_method"] = "compressed-tensors";
  qc["format"] = formats.size() == 1 ? *formats.begin() : (formats.empty() ? "dense" : "mixed-precision");
  qc["quantization_status"] = "compressed";
  qc["version"] = kLayoutVersion;
  qc["config_groups"] = groups;
  qc["ignore"] = compress_expert_names(float_modules(in), all);
  qc["kv_cache_scheme"] = nullptr;
  qc["sparsity_config"] = json::object();
  qc["global_compression_ratio"] = nullptr;
  return {qc, {}};
}

// `ignore` and the module targets of every config group (class-name targets
// such as "Linear" name a layer type, not a module).
std::vector<ConfigModuleEntry> ct_module_entries(const json& qc) {
  std::vector<ConfigModuleEntry> entries;
  for (const auto& e : config_strings(qc, "ignore")) entries.push_back({"ignore", e});
  if (!qc.is_object() || !qc.contains("config_groups") || !qc["config_groups"].is_object()) return entries;
  for (const auto& [g, grp] : qc["config_groups"].items())
    for (const auto& t : config_strings(grp, "targets"))
      if (t.starts_with("re:") || t.find('.') != std::string::npos)
        entries.push_back({"config_groups." + g + ".targets", t});
  return entries;
}

std::vector<std::string> ct_unimplemented(const json& qc) {
  std::vector<std::string> out;
  if (config_sets(qc, "kv_cache_scheme")) out.push_back("kv_cache_scheme: a quantized KV cache");
  if (config_sets(qc, "transform_config")) out.push_back("transform_config: online rotations of activations");
  if (qc.is_object() && qc.contains("config_groups") && qc["config_groups"].is_object())
    for (const auto& [g, grp] : qc["config_groups"].items())
      if (config_sets(grp, "output_activations"))
        out.push_back(fmt::format("config_groups.{}.output_activations: quantized layer outputs", g));
  return out;
}

}  // namespace

const DialectOps& ct_ops() {
  static const DialectOps ops{.check = ct_check,
                              .adapt = ct_adapt,
                              .suffix = ct_suffix,
                              .scheme_json = ct_scheme_json,
                              .comparable = ct_comparable,
                              .build = ct_build,
                              .module_entries = ct_module_entries,
                              .unimplemented_numerics = ct_unimplemented,
                              .engines = {Engine::VllmCompressedTensors, Engine::SglangCompressedTensors}};
  return ops;
}

}  // namespace selq::exporter::detail

namespace selq::exporter {

bool keeps_source_ct_groups(const nlohmann::json& src) {
  return src.is_object() && src.value("quant_method", "") == "compressed-tensors" && src.contains("config_groups") &&
         src["config_groups"].is_object();
}

}  // namespace selq::exporter
