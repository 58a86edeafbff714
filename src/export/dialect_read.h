#pragma once
// Reading a dialect back, next to its writers: which dialect a checkpoint's
// quantization_config is, which selq scheme a config entry describes, which
// of the config's own keys name modules, and which engine loader reads it.
// Verify, the runtime and requantize all ask these.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/dialect.h"
#include "export/engine_resolve.h"
#include "quant/scheme.h"

namespace selq::exporter {

// From quant_method (and ModelOpt's hf_quant_config keys); nullopt when the
// object is none of the three.
std::optional<Dialect> dialect_of_config(const nlohmann::json& quantization_config);

// The quant_method of a quantization_config selq cannot read (neither one of
// its dialects nor DeepSeek's native block FP8, export/native_fp8.h), e.g.
// gpt-oss's native "mxfp4"; nullopt when it reads it or there is none. Its
// quantized tensors would be misdescribed by any config selq writes, so plan
// and verify refuse such a source by name rather than pass it through.
std::optional<std::string> unread_quant_method(const nlohmann::json& quantization_config);

// Inverse of scheme_config_json: the dialect-adapted scheme (from
// quant::writable_schemes) whose config object equals `scheme_json`, or
// nullopt when selq writes no such scheme. `model_dtype` decides the options
// a dialect derives from it (compressed-tensors' FP8 channel scale dtype).
std::optional<quant::SchemeSpec> scheme_from_config_json(Dialect d, const nlohmann::json& scheme_json,
                                                         DType model_dtype);
// The same for a config whose model dtype is unknown: tries BF16, F16, F32
// (what the config does not record, such as a scale dtype, is BF16's; read it
// from the stored tensors).
std::optional<quant::SchemeSpec> scheme_from_config_json_any_dtype(Dialect d, const nlohmann::json& scheme_json);

// The dialect-adapted scheme whose name() is `name` (the manifest's "scheme").
std::optional<quant::SchemeSpec> scheme_from_name(Dialect d, const std::string& name, DType model_dtype);

// Entries of the config that name modules (compressed-tensors' ignore and
// module targets, quark's exclude and layer_quant_config keys, ModelOpt's
// exclude_modules and quantized_layers); `where` is the key they sit under.
struct ConfigModuleEntry {
  std::string where, pattern;
};
std::vector<ConfigModuleEntry> config_module_entries(Dialect d, const nlohmann::json& quantization_config);

// Side files: what a dialect writes beside config.json that carries its config
// too (ModelOpt's hf_quant_config.json, which some of its checkpoints have alone).
// True for any dialect's side file (a writer replaces it, never copies it).
bool is_config_side_file(const std::string& file_name);
// The config a local checkpoint directory holds in a dialect's side file (for
// a checkpoint whose config.json has no quantization_config), else null.
nlohmann::json side_file_config(const std::string& checkpoint_dir);

// What the config asks of an engine beyond its linear weights that selq does
// not implement ("field: what it does"): a reader that computes with the
// model (eval, calibrate) refuses it by name rather than compute otherwise.
std::vector<std::string> unimplemented_numerics(Dialect d, const nlohmann::json& quantization_config);

// The vLLM loader that reads a dialect (the runtime loads modules as it does).
Engine vllm_engine_for(Dialect d);

}  // namespace selq::exporter
