#include "runtime/hf_config.h"

#include <fmt/format.h>

#include "core/error.h"

namespace selq::runtime {

using nlohmann::json;

const json& decoder_config(const json& config) {
  if (config.is_object() && config.contains("text_config") && config["text_config"].is_object())
    return config["text_config"];
  return config;
}

double required_number(const json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_number())
    throw_bad_input(fmt::format("{}: config.json needs a number '{}'", source, key));
  return c[key].get<double>();
}

namespace {

// "default" (or absent) is the plain rotation; transformers 4 spells the key
// `type` in older files, `rope_type` in newer ones.
std::string rope_type_of(const json& params) {
  if (params.contains("rope_type") && params["rope_type"].is_string()) return params["rope_type"];
  if (params.contains("type") && params["type"].is_string()) return params["type"];
  return "default";
}

void require_default_rope(const json& params, const char* field, const std::string& source) {
  const std::string type = rope_type_of(params);
  if (type != "default")
    throw_unsupported(fmt::format("{}: {} with rope_type '{}' is not implemented by the reference runtime ({})",
                                  source, field, type, params.dump()));
}

}  // namespace

RopeConfig rope_from_config(const json& c, const std::string& source) {
  RopeConfig rope;
  // transformers 5: everything RoPE in one object (per layer type for models
  // that mix attention kinds: an object of objects, which this runtime does not run).
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const json& p = c["rope_parameters"];
    if (!p.is_object() || !p.contains("rope_theta"))
      throw_unsupported(fmt::format("{}: rope_parameters {} is not one RoPE with a rope_theta (per-layer-type RoPE "
                                    "is not implemented by the reference runtime)",
                                    source, p.dump()));
    require_default_rope(p, "rope_parameters", source);
    rope.theta = required_number(p, "rope_theta", source);
  } else {
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
      if (!c["rope_scaling"].is_object())
        throw_bad_input(fmt::format("{}: rope_scaling {} is not an object", source, c["rope_scaling"].dump()));
      require_default_rope(c["rope_scaling"], "rope_scaling", source);
    }
    if (!c.contains("rope_theta"))
      throw_bad_input(fmt::format("{}: config.json has neither 'rope_theta' (transformers 4) nor "
                                  "'rope_parameters' (transformers 5)",
                                  source));
    rope.theta = required_number(c, "rope_theta", source);
  }
  if (!(rope.theta > 0)) throw_bad_input(fmt::format("{}: rope_theta {} is not positive", source, rope.theta));
  return rope;
}

}  // namespace selq::runtime
