#pragma once
// Per-dialect entry points behind the dispatch in dialect.cpp, and helpers
// the three dialect files share. Not part of the public interface.
#include <map>
#include <string>
#include <vector>

#include "export/dialect.h"

namespace selq::exporter::detail {

[[noreturn]] void unsupported(Dialect d, const quant::SchemeSpec& spec, const std::string& why);

// Throws BadInput when fused shards (q/k/v, gate/up, q_a/kv_a) or the routed
// experts of one MoE layer were given different schemes: no engine can load
// that (ENGINES.md §7 rules 3-4).
void check_engine_groups_consistent(const ConfigInput& in);

std::vector<std::string> all_module_names(const ConfigInput& in);

// Distinct schemes in order of first appearance, with their module lists.
struct SchemeGroup {
  quant::SchemeSpec spec;
  std::vector<std::string> modules;
};
std::vector<SchemeGroup> group_by_scheme(const ConfigInput& in, bool skip_preexisting);
std::vector<std::string> float_modules(const ConfigInput& in);

// Replaces every complete set of routed-expert children of one MoE layer in
// `names` by one anchored regex `re:<escaped parent>\.\d+\.(a|b|c)$`, so a
// 384-expert model does not write 70k names. Children are complete when all
// of the model's children of that parent are in `names`.
std::vector<std::string> compress_expert_names(const std::vector<std::string>& names,
                                               const std::vector<std::string>& all_modules);

// Quark and ModelOpt store a scheme alike: F32 per-channel and per-tensor
// scales without the kept dim, NVFP4 in ModelOpt's convention. Their adapt.
quant::SchemeSpec f32_scale_adapt(quant::SchemeSpec s);

void ct_check(const quant::SchemeSpec& s);
quant::SchemeSpec ct_adapt(quant::SchemeSpec s, DType model_dtype);
std::string ct_suffix(const quant::SchemeSpec& s, quant::OutRole role);
nlohmann::json ct_scheme_json(const quant::SchemeSpec& s);
nlohmann::json ct_comparable(const nlohmann::json& scheme);
ConfigOutput ct_build(const ConfigInput& in);

void quark_check(const quant::SchemeSpec& s);
std::string quark_suffix(const quant::SchemeSpec& s, quant::OutRole role);
nlohmann::json quark_scheme_json(const quant::SchemeSpec& s);
ConfigOutput quark_build(const ConfigInput& in);

void modelopt_check(const quant::SchemeSpec& s);
std::string modelopt_suffix(const quant::SchemeSpec& s, quant::OutRole role);
nlohmann::json modelopt_scheme_json(const quant::SchemeSpec& s);
ConfigOutput modelopt_build(const ConfigInput& in);

}  // namespace selq::exporter::detail
