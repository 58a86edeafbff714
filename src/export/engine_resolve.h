#pragma once
// Mimics how each serving engine finds the quantization scheme of one module
// from a `quantization_config` (docs/ENGINE_RULES.md §1-§4), so that selq can prove a
// config it writes (or a checkpoint it verifies) is read as intended.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/dialect.h"

namespace selq::exporter {

enum class Engine {
  VllmCompressedTensors,
  SglangCompressedTensors,
  VllmQuark,
  SglangQuark,
  AtomQuark,
  VllmModelOpt,
};
std::string engine_name(Engine e);
// The engines that read `d`'s config.
std::vector<Engine> engines_for(Dialect d);

// `module` is a checkpoint module name ("model.layers.0.self_attn.q_proj",
// "model.layers.3.mlp.experts.7.up_proj") or an engine module name
// ("...qkv_proj", "...mlp.experts"); it is mapped to the engine's module
// (fused layer, routed experts) using `all_modules` (every linear module of
// the checkpoint). Returns the scheme object the engine would apply, in the
// dialect's own form (see scheme_config_json), or nullopt when the engine
// builds the module unquantized. Throws BadInput where the engine itself
// would raise (fused shards resolving differently, unmatched CT target in
// SGLang, ...). For modelopt, `quantization_config` may be the config.json
// object or the hf_quant_config.json content.
std::optional<nlohmann::json> resolve_layer(Engine e, const nlohmann::json& quantization_config,
                                            const std::string& module,
                                            const std::vector<std::string>& all_modules);

// Same, reusable across many lookups on one model (indexes built once).
class EngineResolver {
 public:
  EngineResolver(Engine e, nlohmann::json quantization_config, std::vector<std::string> all_modules);
  ~EngineResolver();
  EngineResolver(EngineResolver&&) noexcept;
  // The reference stays valid for the resolver's lifetime.
  const std::optional<nlohmann::json>& resolve(const std::string& module);
  // The engine module that `module` belongs to.
  std::string engine_module(const std::string& module) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Resolves every module of `in` with every engine that reads dialect `d` and
// lists each disagreement with the decisions ("vllm-quark: model.layers.1...
// resolved to X, decided Y"). Empty means every engine reads the config as
// decided. Modules kept from a compressed-tensors source only need to resolve
// to some scheme.
std::vector<std::string> check_config_resolution(Dialect d, const ConfigInput& in,
                                                 const nlohmann::json& quantization_config);

// The problem, if any, of a head the engine builds with no stored weight
// (ConfigInput::unstored_heads): it must resolve as float.
std::optional<std::string> unstored_head_problem(EngineResolver& resolver, Engine e, const std::string& head);

}  // namespace selq::exporter
