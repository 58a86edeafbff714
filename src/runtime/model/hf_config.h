#pragma once
// Reading a transformers config.json as both transformers 4 and 5 write it:
// the decoder's own config (a multimodal wrapper nests it as `text_config`),
// RoPE from `rope_parameters` (5) or `rope_theta` + `rope_scaling` (4). A
// field the runtime needs and cannot find, or finds in a form it does not
// implement, is an error naming the field: never a default.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {

// The decoder's config: `text_config` when the file nests one, else the file.
const nlohmann::json& decoder_config(const nlohmann::json& config);

// RoPE as the config states it. rope_from_config implements only the plain
// rotation (rope_type "default"); anything else is Unsupported, naming the
// field and the type.
struct RopeConfig {
  double theta{0};
  std::string type{"default"};  // "default" or "yarn"
  // YaRN (transformers' _compute_yarn_parameters), meaningful when type == "yarn":
  double factor{1}, beta_fast{32}, beta_slow{1};
  double mscale{0}, mscale_all_dim{0};      // 0: absent
  double attention_factor{0};               // 0: absent (derived from factor and mscale)
  std::int64_t original_max_positions{0};
  bool truncate{true};
};
RopeConfig rope_from_config(const nlohmann::json& decoder, const std::string& source);
// The same, also accepting rope_type "yarn" as transformers 4 (`rope_scaling`
// beside `rope_theta`) and 5 (`rope_parameters`) write it, DeepSeek-V3's form
// included (original_max_position_embeddings, mscale, mscale_all_dim). Any other
// type, or a YaRN key it does not know, is Unsupported naming it.
RopeConfig rope_or_yarn_from_config(const nlohmann::json& decoder, const std::string& source);

// Inverse frequencies for `dim` rotary dimensions (dim / 2 values, F32 as
// transformers computes them) and the factor its cos/sin are multiplied by
// (YaRN's attention_factor; 1 for the plain rotation).
struct RopeTables {
  std::vector<float> inv_freq;
  float attention_factor{1.0f};
};
RopeTables rope_tables(const RopeConfig& rope, std::int64_t dim, std::int64_t max_positions);

// YaRN's 0.1 * mscale * ln(scale) + 1 (1 when scale <= 1).
double yarn_get_mscale(double scale, double mscale);

// A required number (BadInput naming `key` when absent or not a number).
double required_number(const nlohmann::json& c, const char* key, const std::string& source);

}  // namespace selq::runtime
