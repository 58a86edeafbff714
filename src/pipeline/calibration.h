#pragma once
// Reading the per-module activation amax that `selq calibrate` writes, for
// schemes with static activation scales (FP8 static, NVFP4 W4A4).
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace selq::pipeline {

// Parses a "selq-calibration-v1" file: {"format", ..., "activation_amax":
// {module: amax}}. Errors name the file and, where it applies, the module.
std::map<std::string, float> load_activation_amax(const std::string& path);

// What text the calibration read ({"path", "source", "bytes", "line_xxh3"}),
// for the manifest, so that `selq eval` can refuse text that overlaps it;
// {"path"} alone for files written before selq recorded it.
nlohmann::json load_calibration_provenance(const std::string& path);

}  // namespace selq::pipeline
