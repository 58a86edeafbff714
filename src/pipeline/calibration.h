#pragma once
// Reading what `selq calibrate` writes: the per-module activation amax, for
// schemes with static activation scales (FP8 static, NVFP4 W4A4), and the
// input second moments, for rounding `weighted`.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::pipeline {

// Parses a "selq-calibration-v1" file: {"format", ..., "activation_amax":
// {module: amax}}. Errors name the file and, where it applies, the module.
std::map<std::string, float> load_activation_amax(const std::string& path);

// Each linear module's input second moments (mean x² per input channel) from
// the moments file the calibration JSON at `path` names ("input_moments":
// {"file", "content_xxh3"}), checked against that hash. Errors name the file:
// a calibration written without -o or by an older selq has none.
using InputMoments = std::map<std::string, std::shared_ptr<const std::vector<float>>>;
InputMoments load_input_moments(const std::string& path);

// What text the calibration read ({"path", "source", "bytes", "line_xxh3"}),
// for the manifest, so that `selq eval` can refuse text that overlaps it;
// {"path"} alone for files written before selq recorded it. With routed experts
// also "expert_tokens", "unreached_experts" and "unreached_expert_rule", as the
// calibration has them.
nlohmann::json load_calibration_provenance(const std::string& path);

}  // namespace selq::pipeline
