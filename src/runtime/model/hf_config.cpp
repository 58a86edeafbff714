#include "runtime/model/hf_config.h"

#include <algorithm>
#include <cmath>
#include <iterator>

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

// YaRN's keys as transformers reads them (_compute_yarn_parameters); a key it
// would read that is not here, or one it would not, is refused by name.
void read_yarn(const json& p, const json& c, const char* field, const std::string& source, RopeConfig& rope) {
  static const char* kKnown[] = {"rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
                                 "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
                                 "truncate", "partial_rotary_factor"};
  for (const auto& [k, v] : p.items())
    if (std::find(std::begin(kKnown), std::end(kKnown), k) == std::end(kKnown))
      throw_unsupported(fmt::format("{}: {}.{} (YaRN) is not implemented by the reference runtime", source, field, k));
  auto num = [&](const char* k, double dflt) {
    if (!p.contains(k) || p[k].is_null()) return dflt;
    if (!p[k].is_number()) throw_bad_input(fmt::format("{}: {}.{} is not a number ({})", source, field, k, p[k].dump()));
    return p[k].get<double>();
  };
  if (p.contains("partial_rotary_factor") && num("partial_rotary_factor", 1.0) != 1.0)
    throw_unsupported(fmt::format("{}: {}.partial_rotary_factor {} is not implemented by the reference runtime",
                                  source, field, p["partial_rotary_factor"].dump()));
  rope.type = "yarn";
  // transformers: a top-level original_max_position_embeddings wins, then the
  // RoPE object's, then max_position_embeddings.
  if (c.contains("original_max_position_embeddings") && c["original_max_position_embeddings"].is_number_integer())
    rope.original_max_positions = c["original_max_position_embeddings"].get<std::int64_t>();
  else if (p.contains("original_max_position_embeddings") && p["original_max_position_embeddings"].is_number())
    rope.original_max_positions = p["original_max_position_embeddings"].get<std::int64_t>();
  else if (c.contains("max_position_embeddings") && c["max_position_embeddings"].is_number_integer())
    rope.original_max_positions = c["max_position_embeddings"].get<std::int64_t>();
  else
    throw_bad_input(fmt::format("{}: YaRN needs {}.original_max_position_embeddings or max_position_embeddings", source,
                                field));
  if (rope.original_max_positions <= 0)
    throw_bad_input(fmt::format("{}: original_max_position_embeddings {} is not positive", source,
                                rope.original_max_positions));
  if (!p.contains("factor")) throw_bad_input(fmt::format("{}: {} (YaRN) has no 'factor'", source, field));
  if (p["factor"].is_null()) {
    if (!c.contains("max_position_embeddings") || !c["max_position_embeddings"].is_number())
      throw_bad_input(fmt::format("{}: {}.factor is null and there is no max_position_embeddings", source, field));
    rope.factor = c["max_position_embeddings"].get<double>() / static_cast<double>(rope.original_max_positions);
  } else {
    rope.factor = num("factor", 1.0);
  }
  if (!(rope.factor > 0)) throw_bad_input(fmt::format("{}: {}.factor {} is not positive", source, field, rope.factor));
  // `get(k) or default`: 0 reads as absent.
  rope.beta_fast = num("beta_fast", 0) != 0 ? num("beta_fast", 0) : 32.0;
  rope.beta_slow = num("beta_slow", 0) != 0 ? num("beta_slow", 0) : 1.0;
  rope.mscale = num("mscale", 0);
  rope.mscale_all_dim = num("mscale_all_dim", 0);
  rope.attention_factor = num("attention_factor", 0);
  if (p.contains("truncate")) {
    if (!p["truncate"].is_boolean())
      throw_bad_input(fmt::format("{}: {}.truncate is not a boolean ({})", source, field, p["truncate"].dump()));
    rope.truncate = p["truncate"].get<bool>();
  }
}

void read_rope_params(const json& params, const json& c, const char* field, const std::string& source, bool yarn_ok,
                      RopeConfig& rope) {
  const std::string type = rope_type_of(params);
  if (type == "default") return;
  if (type == "yarn" && yarn_ok) return read_yarn(params, c, field, source, rope);
  throw_unsupported(fmt::format("{}: {} with rope_type '{}' is not implemented by the reference runtime ({})", source,
                                field, type, params.dump()));
}

RopeConfig parse_rope(const json& c, const std::string& source, bool yarn_ok) {
  RopeConfig rope;
  // transformers 5: everything RoPE in one object (per layer type for models
  // that mix attention kinds: an object of objects, which this runtime does not run).
  if (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) {
    const json& p = c["rope_parameters"];
    if (!p.is_object() || !p.contains("rope_theta"))
      throw_unsupported(fmt::format("{}: rope_parameters {} is not one RoPE with a rope_theta (per-layer-type RoPE "
                                    "is not implemented by the reference runtime)",
                                    source, p.dump()));
    read_rope_params(p, c, "rope_parameters", source, yarn_ok, rope);
    rope.theta = required_number(p, "rope_theta", source);
  } else {
    if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
      if (!c["rope_scaling"].is_object())
        throw_bad_input(fmt::format("{}: rope_scaling {} is not an object", source, c["rope_scaling"].dump()));
      read_rope_params(c["rope_scaling"], c, "rope_scaling", source, yarn_ok, rope);
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

}  // namespace

RopeConfig rope_from_config(const json& c, const std::string& source) { return parse_rope(c, source, false); }

RopeConfig rope_or_yarn_from_config(const json& c, const std::string& source) { return parse_rope(c, source, true); }

double yarn_get_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

RopeTables rope_tables(const RopeConfig& rope, std::int64_t dim, std::int64_t /*max_positions*/) {
  RopeTables t;
  const std::int64_t half = dim / 2;
  t.inv_freq.resize(static_cast<std::size_t>(half));
  const double base = rope.theta;
  auto pos_freq = [&](std::int64_t i) {
    return std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  };
  if (rope.type != "yarn") {
    for (std::int64_t i = 0; i < half; ++i) t.inv_freq[static_cast<std::size_t>(i)] = static_cast<float>(1.0 / pos_freq(i));
    return t;
  }
  const double factor = rope.factor;
  if (rope.attention_factor != 0)
    t.attention_factor = static_cast<float>(rope.attention_factor);
  else if (rope.mscale != 0 && rope.mscale_all_dim != 0)
    t.attention_factor =
        static_cast<float>(yarn_get_mscale(factor, rope.mscale) / yarn_get_mscale(factor, rope.mscale_all_dim));
  else
    t.attention_factor = static_cast<float>(yarn_get_mscale(factor, 1.0));
  const double pi = 3.14159265358979323846;
  const auto orig = static_cast<double>(rope.original_max_positions);
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2 * pi))) / (2 * std::log(base));
  };
  double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (std::int64_t i = 0; i < half; ++i) {
    // transformers computes these in F32; the difference is an ulp or two.
    const float pf = static_cast<float>(pos_freq(i));
    const float extrap = 1.0f / pf, interp = 1.0f / (static_cast<float>(factor) * pf);
    const float ramp = std::clamp(static_cast<float>((static_cast<double>(i) - low) / (high - low)), 0.0f, 1.0f);
    const float ef = 1.0f - ramp;
    t.inv_freq[static_cast<std::size_t>(i)] = interp * (1.0f - ef) + extrap * ef;
  }
  return t;
}

}  // namespace selq::runtime
