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
  float v = 0.0f;
  if (act_mode_traits(spec.act).input_scale == InputScaleKind::FP8)
    v = input_amax / 448.0f;  // dequant x = q * input_scale, like the weight scale
  else if (spec.nvfp == NvfpConvention::ModelOpt)
    v = input_amax / (6.0f * 448.0f);
  else
    v = (6.0f * 448.0f) / input_amax;
  detail::store_float(o->dtype, out.data(), 0, v);
}

}  // namespace selq::quant
