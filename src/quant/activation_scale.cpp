// Static activation scales: the calibrated input amax of a layer turned into
// the tensor an engine loads for FP8-static or NVFP4 activations.
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "quant/act_modes.h"
#include "quant/detail.h"

namespace selq::quant {

std::optional<OutTensorSpec> activation_scale_output(const SchemeSpec& spec, const Shape& weight_shape) {
  const InputScaleKind kind = act_mode_traits(spec.act).input_scale;
  if (kind == InputScaleKind::None) return std::nullopt;
  if (weight_shape.size() != 2)
    throw_unsupported(fmt::format("{} with static activation scales needs a 2-D weight (got {}): "
                                  "per-expert calibration is not supported",
                                  spec.name(), shape_to_string(weight_shape)));
  if (kind == InputScaleKind::FP8) return OutTensorSpec{OutRole::InputScale, spec.scale_dtype, Shape{1}};
  // Same shape convention as the weight's global scale of that convention.
  return OutTensorSpec{OutRole::InputScale, DType::F32,
                       spec.nvfp == NvfpConvention::ModelOpt ? Shape{} : Shape{1}};
}

void encode_activation_scale(const SchemeSpec& spec, float input_amax, std::span<std::uint8_t> out) {
  const auto o = activation_scale_output(spec, Shape{1, 1});
  if (!o) throw Error(ErrorKind::Internal, fmt::format("{} has no static activation scale", spec.name()));
  if (out.size() != dtype_nbytes(o->dtype, 1))
    throw Error(ErrorKind::Internal, "activation scale buffer has the wrong size");
  if (!(input_amax > 0.0f) || !std::isfinite(input_amax))
    throw_bad_input(fmt::format("calibrated input amax {} is not positive and finite", input_amax));
  // FP8: dequant x = q * input_scale, like the weight scale. NVFP4: ModelOpt
  // stores the reciprocal of compressed-tensors' global scale.
  float v = static_scale_for_amax(spec.act, input_amax);
  if (act_mode_traits(spec.act).input_scale == InputScaleKind::NVFP4Global && spec.nvfp == NvfpConvention::ModelOpt)
    v = input_amax / (6.0f * 448.0f);
  detail::store_float(o->dtype, out.data(), 0, v);
}

float static_scale_for_amax(ActMode mode, float input_amax) {
  return act_mode_traits(mode).input_scale == InputScaleKind::NVFP4Global ? (6.0f * 448.0f) / input_amax
                                                                          : input_amax / 448.0f;
}

float static_scale_from_stored(const SchemeSpec& spec, float stored) {
  const InputScaleKind kind = act_mode_traits(spec.act).input_scale;
  if (kind == InputScaleKind::NVFP4Global && spec.nvfp == NvfpConvention::ModelOpt) return 1.0f / stored;
  return stored;
}

}  // namespace selq::quant
