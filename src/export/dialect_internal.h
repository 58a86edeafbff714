#pragma once
// Each dialect's entry points behind the dispatch in dialect.cpp, and helpers
// the dialect files share. Not part of the public interface.
#include <array>
#include <map>
#include <string>
#include <vector>

#include "core/enum_table.h"
#include "export/dialect.h"
#include "export/dialect_read.h"

namespace selq::exporter::detail {

// Everything the dispatch in dialect.cpp and dialect_read.cpp asks one
// dialect but its name (kDialectNames), defined in that dialect's own
// file (dialect_ct.cpp, ...): adding a dialect is one such file, its name and
// one case in dialect_ops().
struct DialectOps {
  // Throws Unsupported naming the scheme and why the dialect cannot express it.
  void (*check)(const quant::SchemeSpec&);
  quant::SchemeSpec (*adapt)(quant::SchemeSpec, DType model_dtype);
  std::string (*suffix)(const quant::SchemeSpec&, quant::OutRole);
  nlohmann::json (*scheme_json)(const quant::SchemeSpec&);
  nlohmann::json (*comparable)(const nlohmann::json& scheme_json);
  ConfigOutput (*build)(const ConfigInput&);
  std::vector<ConfigModuleEntry> (*module_entries)(const nlohmann::json& quantization_config);
  // Fields of a config that change what an engine computes beyond the linear
  // weights (a quantized KV cache, output or softmax quantization, online
  // rotations): "field: what it does", each one selq does not implement.
  std::vector<std::string> (*unimplemented_numerics)(const nlohmann::json& quantization_config);
  // The engines that read it (engine_resolve.h replays each), vLLM's loader
  // first: the runtime loads as that one does.
  std::vector<Engine> engines;
  const char* side_file{nullptr};  // a file beside config.json that carries the config too
};
const DialectOps& dialect_ops(Dialect d);
const DialectOps& ct_ops();
const DialectOps& quark_ops();
const DialectOps& modelopt_ops();

// A dialect's table of scheme kinds (CtRow, QuarkRow) has one row per
// SchemeKind in enum order, each with its refusal text: checked at compile time.
template <class Row, std::size_t N>
constexpr bool rows_in_kind_order(const std::array<Row, N>& rows) {
  return rows_in_enum_order<quant::kSchemeKindCount>(
      rows, [](const Row& r) { return r.kind; }, [](const Row& r) { return r.why != nullptr; });
}

[[noreturn]] void unsupported(Dialect d, const quant::SchemeSpec& spec, const std::string& why);
// A kind row's check: Unsupported with `why` when the dialect has no format for
// the kind (`writable` false) or the scheme's activation mode is not one of
// `inputs` (quant::act_bit()s), with what `problem` says of its options first.
void check_kind_row(Dialect d, const quant::SchemeSpec& spec, bool writable,
                    std::string (*problem)(const quant::SchemeSpec&), unsigned inputs, const char* why);
// A comparable form that is the scheme's config object itself (DialectOps::comparable).
nlohmann::json comparable_as_written(const nlohmann::json& scheme_json);

// True when qc[key] is there and says something (not null, {}, [] or false).
bool config_sets(const nlohmann::json& qc, const char* key);

// The strings of qc[key] when it is an array (configs in the wild are loose:
// another type names nothing).
std::vector<std::string> config_strings(const nlohmann::json& qc, const char* key);

// Throws BadInput when fused shards (q/k/v, gate/up, q_a/kv_a) or the routed
// experts of one MoE layer were given different schemes: no engine can load
// that (docs/ENGINE_RULES.md §7 rules 3-4).
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
quant::SchemeSpec f32_scale_adapt(quant::SchemeSpec s, DType model_dtype);

}  // namespace selq::exporter::detail
