#pragma once
// Reading the per-module activation amax that `selq calibrate` writes, for
// schemes with static activation scales (FP8 static, NVFP4 W4A4).
#include <map>
#include <string>

namespace selq::pipeline {

// Parses a "selq-calibration-v1" file: {"format", ..., "activation_amax":
// {module: amax}}. Errors name the file and, where it applies, the module.
std::map<std::string, float> load_activation_amax(const std::string& path);

}  // namespace selq::pipeline
