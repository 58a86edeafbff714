#pragma once
// Per-linear activation amax measured with the reference runtime, for static
// activation scales (FP8 static input_scale = amax/448; NVFP4 input global
// scale = 448*6/amax in the compressed-tensors convention).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {

struct CalibrationResult {
  std::string model;
  std::string text_source;
  std::int64_t tokens{0};
  std::int64_t context{0};
  std::map<std::string, float> amax;  // linear module -> max |input activation|
  nlohmann::json text_provenance;     // the bytes read and their lines (text_overlap.h)
  // {"format": "selq-calibration-v1", "model", "text", "tokens", "context",
  //  "text_provenance", "activation_amax": {module: amax}}
  nlohmann::json to_json() const;
};

struct Linear;
// Raises `amax[l.module]` to the max |x| of the `rows` inputs a linear-hook
// call saw (CausalLM::set_activation_hook): calibrate's measure, and the
// planner's for its calibrated candidates.
void record_input_amax(std::map<std::string, float>& amax, const Linear& l, const float* x, std::int64_t rows);

// Runs the text through the model in windows of `context` tokens (at most
// `max_tokens`, 0: all) and records each linear's input amax. Fused inputs
// (q/k/v, gate/up) read the same activations, so they get the same value.
CalibrationResult calibrate(const std::string& checkpoint, const std::string& text, const std::string& text_source,
                            std::int64_t max_tokens, std::int64_t context,
                            const std::function<void(std::uint64_t, std::uint64_t)>& on_progress = {});

}  // namespace selq::runtime
