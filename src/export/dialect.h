#pragma once
// Dialects: how a scheme is written down for one engine family: tensor names,
// the scheme options the dialect requires (scale dtype/shape, NVFP4
// convention), and the `quantization_config` JSON. docs/FORMAT_RULES.md
// §5-§6 and docs/ENGINE_RULES.md §7 are the rules.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_table.h"
#include "quant/scheme.h"

namespace selq::exporter {

// The dialects and their names, the one list: a recipe's `dialect:`, --dialect
// and the manifest spell them so (recipe keeps `dialect:` as written; the plan
// checks it here).
enum class Dialect { CompressedTensors, Quark, ModelOpt };
inline constexpr std::array<const char*, 3> kDialectNames = {"compressed-tensors", "quark", "modelopt"};
inline constexpr std::array kAllDialects = {Dialect::CompressedTensors, Dialect::Quark, Dialect::ModelOpt};
static_assert(rows_in_enum_order<kDialectNames.size()>(
                  kAllDialects, [](Dialect d) { return d; }, [](Dialect) { return true; }),
              "kAllDialects: every Dialect in enum order, one per name in kDialectNames");

std::string dialect_name(Dialect d);                   // "compressed-tensors", "quark", "modelopt"
// "compressed-tensors, quark or modelopt", from kDialectNames (for messages).
std::string dialect_names_text();
// The quantization_configs selq reads in a source: the dialects, and DeepSeek-V3's
// native block FP8 ("... or fp8 with weight_block_size").
std::string readable_quant_methods_text();
std::optional<Dialect> dialect_from_name(const std::string& name);
// Same, for a name a user typed: BadInput listing the dialects when unknown.
Dialect parse_dialect(const std::string& name);

// Throws Unsupported ("the quark dialect cannot express nvfp4 with int8 ...")
// when the dialect cannot express the scheme.
void check_dialect_supports(Dialect d, const quant::SchemeSpec& spec);

// Sets the options a dialect prescribes (scale dtype and keepdim, NVFP4
// convention, int32 packing). `model_dtype` is the source weight dtype, which
// compressed-tensors uses for FP8 channel scales.
quant::SchemeSpec adapt_scheme_for_dialect(Dialect d, quant::SchemeSpec spec, DType model_dtype);

// Name of an output tensor: `module` is the module prefix (tensor name
// without ".weight"), e.g. "model.layers.0.self_attn.o_proj".
std::string output_tensor_name(Dialect d, const quant::SchemeSpec& spec, quant::OutRole role,
                               const std::string& module);

struct ModuleDecision {
  std::string module;                           // "model.layers.3.self_attn.o_proj"
  std::optional<quant::SchemeSpec> scheme;      // nullopt: left in float (needs ignore/exclude)
  bool preexisting{false};  // already quantized in the source; its config group is kept
};

struct ConfigInput {
  std::vector<ModuleDecision> linear_modules;   // every linear-weight module of the model
  nlohmann::json source_quantization_config;    // null when the source had none
  // Heads the engines build with no stored weight (unstored_head_modules):
  // float, and excluded wherever an engine would otherwise quantize them.
  std::vector<std::string> unstored_heads{};
};

// The `quantization_config` object for config.json. For ModelOpt, also the
// content of hf_quant_config.json (returned via `extra_files`).
struct ConfigOutput {
  nlohmann::json quantization_config;
  std::vector<std::pair<std::string, std::string>> extra_files;  // name, content
};
ConfigOutput build_quantization_config(Dialect d, const ConfigInput& in);

// Whether a compressed-tensors output keeps the source's own config groups for
// the modules that pass through: only a compressed-tensors source's (ModelOpt's
// config.json form also has `config_groups`, with its own conventions).
bool keeps_source_ct_groups(const nlohmann::json& source_quantization_config);


// What one scheme looks like in the dialect's config: for compressed-tensors
// a config group without `targets` ({weights, input_activations,
// output_activations, format}); for quark a layer config ({weight,
// input_tensors, output_tensors, bias}); for modelopt {quant_algo[,
// group_size]}. The engine resolvers return these same objects, so tests
// compare a resolved layer against the decided scheme with ==.
nlohmann::json scheme_config_json(Dialect d, const quant::SchemeSpec& spec);

// `scheme_json` reduced to what decides the stored format and the engine's
// kernels, for comparing a config read from a checkpoint with
// scheme_config_json. compressed-tensors: its library serializes every
// QuantizationArgs field, defaults included (what llm-compressor writes):
// null for options not in use, and the observer used at calibration; those
// are dropped, every other field (an actorder, a zero-point dtype) is kept.
// Other dialects: unchanged.
nlohmann::json comparable_scheme_config(Dialect d, const nlohmann::json& scheme_json);

// Human-readable scheme description for messages ("fp8-channel, input fp8
// per-token dynamic"); does not depend on quant's implementation.
std::string scheme_label(const quant::SchemeSpec& spec);

}  // namespace selq::exporter
