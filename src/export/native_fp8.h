#pragma once
// Block FP8 as DeepSeek-V3/R1 and Kimi-K2 ship it (transformers' "fine-grained
// FP8"): quantization_config {quant_method: "fp8", fmt: "e4m3",
// activation_scheme: "dynamic", weight_block_size: [128, 128]}, each quantized
// linear's weight F8_E4M3 with `weight_scale_inv` F32 per block (the value is
// q × scale_inv), activations quantized by the engine per token and group of
// 128. Modules named in `modules_to_not_convert` stay float. selq reads this
// format (verify, eval, calibrate, requantize); it writes selq's dialects.
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "quant/scheme.h"

namespace selq::exporter {

struct NativeFp8 {
  quant::SchemeSpec scheme;                   // FP8Block, F32 scales, dynamic per-token-group-128 input
  std::vector<std::string> not_converted;     // modules_to_not_convert
};

// nullopt when quant_method is not "fp8"; BadInput naming the field (and
// `config_path`) for a form selq does not implement (another fmt, static
// activations, no or a malformed weight_block_size).
std::optional<NativeFp8> native_fp8_config(const nlohmann::json& quantization_config, const std::string& config_path);

// The stored tensor of `module` for a role of the scheme (weight, weight_scale_inv).
std::string native_fp8_tensor(const std::string& module, quant::OutRole role);

// True when `module` is listed in modules_to_not_convert (exactly or as a parent).
bool native_fp8_not_converted(const NativeFp8& f, const std::string& module);

}  // namespace selq::exporter
