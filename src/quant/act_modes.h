#pragma once
// One description per activation mode: its recipe and config name, how a
// scheme label describes it, what a static mode stores next to the weight and
// the quantize-dequantize an engine applies at run time. Recipe parsing, the
// activation scales, the runtime and the export labels ask this table; a new
// mode is one row in act_modes.cpp plus its kernel in activation.cpp.
#include <cstddef>
#include <span>

#include "quant/scheme.h"

namespace selq::quant {

// The calibrated tensor a static mode stores next to the weight.
enum class InputScaleKind {
  None,         // weight-only or dynamic: the engine computes the scales itself
  FP8,          // `input_scale` = amax/448, [1], in the scheme's scale dtype
  NVFP4Global,  // the input global scale, F32, in the scheme's NVFP4 convention
};

struct ActModeTraits {
  ActMode mode;
  const char* name;   // recipe and config name ("fp8-per-token")
  const char* label;  // as a scheme's description says it ("input fp8 per-token dynamic")
  InputScaleKind input_scale;
  // qdq_activation_row for this mode (kernels in activation.cpp).
  void (*qdq)(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);

  bool is_static() const { return input_scale != InputScaleKind::None; }
};

const ActModeTraits& act_mode_traits(ActMode mode);
std::span<const ActModeTraits> all_act_mode_traits();

inline const char* act_mode_name(ActMode mode) { return act_mode_traits(mode).name; }

}  // namespace selq::quant
