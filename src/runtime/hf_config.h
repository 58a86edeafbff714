#pragma once
// Reading a transformers config.json as both transformers 4 and 5 write it:
// the decoder's own config (a multimodal wrapper nests it as `text_config`),
// RoPE from `rope_parameters` (5) or `rope_theta` + `rope_scaling` (4). A
// field the runtime needs and cannot find, or finds in a form it does not
// implement, is an error naming the field: never a default.
#include <string>

#include <nlohmann/json.hpp>

namespace selq::runtime {

// The decoder's config: `text_config` when the file nests one, else the file.
const nlohmann::json& decoder_config(const nlohmann::json& config);

// RoPE as the config states it. Only the plain rotation (rope_type "default")
// is implemented; anything else is Unsupported, naming the field and the type.
struct RopeConfig {
  double theta{0};
};
RopeConfig rope_from_config(const nlohmann::json& decoder, const std::string& source);

// A required number (BadInput naming `key` when absent or not a number).
double required_number(const nlohmann::json& c, const char* key, const std::string& source);

}  // namespace selq::runtime
