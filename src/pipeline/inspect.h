#pragma once
// What is in a checkpoint: tensors by dtype, a per-layer summary of which
// projections are stored in which dtype, and the quantization_config.
#include <string>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"

namespace selq::pipeline {

nlohmann::json inspect_checkpoint(const io::Checkpoint& ckpt, bool with_tensors);
std::string format_inspection(const nlohmann::json& inspection, bool with_tensors);

}  // namespace selq::pipeline
