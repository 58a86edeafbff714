// Reference activation quantize-dequantize, as the engines do at run time.
#include <fmt/format.h>

#include "quant/act_modes.h"
#include "quant/detail.h"

namespace selq::quant {

namespace {

using detail::e4m3_sat_code;
using detail::e4m3_value;

void qdq_fp8(float* x, std::size_t n, float s) {
  for (std::size_t i = 0; i < n; ++i) x[i] = e4m3_value(e4m3_sat_code(x[i] / s)) * s;
}

float amax_of(const float* x, std::size_t n) {
  float a = 0.0f;
  for (std::size_t i = 0; i < n; ++i) a = std::max(a, std::fabs(x[i]));
  return a;
}

void qdq_mx(float* x, std::size_t n, bool fp4, ScaleRule rule) {
  for (std::size_t b = 0; b < n; b += 32) {
    const std::size_t k = std::min<std::size_t>(32, n - b);
    const float amax = amax_of(x + b, k);
    // Same element parameters as the weight path (mx.cpp).
    const std::uint8_t sb = fp4 ? e8m0_scale_from_amax_ref(amax, rule, 2, 1, 6.0f)
                                : e8m0_scale_from_amax_ref(amax, rule, 8, 1, 448.0f);
    if (sb == 0xFF) {
      for (std::size_t i = 0; i < k; ++i) x[b + i] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float scale = std::ldexp(1.0f, sb - 127), inv = std::ldexp(1.0f, 127 - sb);
    for (std::size_t i = 0; i < k; ++i) {
      const float v = x[b + i] * inv;
      x[b + i] = (fp4 ? detail::kE2M1Values[detail::e2m1_code(v)] : e4m3_value(e4m3_sat_code(v))) * scale;
    }
  }
}

void qdq_nvfp4(float* x, std::size_t n, float gs) {
  for (std::size_t b = 0; b < n; b += 16) {
    const std::size_t k = std::min<std::size_t>(16, n - b);
    const float amax = amax_of(x + b, k);
    std::uint8_t sb = e4m3_sat_code(gs * (amax / 6.0f));
    if ((sb & 0x7F) == 0) sb = 0x20;  // compressed-tensors: zero scale -> 0.125
    const float eff = e4m3_value(sb) / gs;
    for (std::size_t i = 0; i < k; ++i)
      x[b + i] = detail::kE2M1Values[detail::e2m1_code(x[b + i] / eff)] * eff;
  }
}

// A static mode's calibrated scale; `need` says which one, for the error.
void require_static_scale(float static_scale, const char* need) {
  if (!(static_scale > 0.0f) || !std::isfinite(static_scale))
    throw_bad_input(fmt::format("{}, got {} (run calibration)", need, static_scale));
}

}  // namespace

namespace detail {

void qdq_act_none(float*, std::size_t, float, ScaleRule) {}

void qdq_act_fp8_dynamic(float* x, std::size_t n, float, ScaleRule) {
  // The caller passes one token (per-token) or the whole tensor flattened
  // (dynamic per-tensor); either way one scale for all n values.
  const float amax = amax_of(x, n);
  if (amax == 0.0f) return;  // all zeros stay zeros (s would be 0)
  qdq_fp8(x, n, amax / 448.0f);
}

void qdq_act_fp8_group128(float* x, std::size_t n, float, ScaleRule) {
  // DeepSeek-V3 act_quant: s = max(amax, 1e-4) / 448 per 128 channels.
  for (std::size_t b = 0; b < n; b += 128) {
    const std::size_t k = std::min<std::size_t>(128, n - b);
    qdq_fp8(x + b, k, std::max(amax_of(x + b, k), 1e-4f) / 448.0f);
  }
}

void qdq_act_fp8_static(float* x, std::size_t n, float static_scale, ScaleRule) {
  require_static_scale(static_scale, "static FP8 activation needs a positive finite input_scale");
  qdq_fp8(x, n, static_scale);
}

void qdq_act_mxfp4(float* x, std::size_t n, float, ScaleRule mx_rule) { qdq_mx(x, n, true, mx_rule); }

void qdq_act_mxfp8(float* x, std::size_t n, float, ScaleRule mx_rule) { qdq_mx(x, n, false, mx_rule); }

void qdq_act_nvfp4(float* x, std::size_t n, float static_scale, ScaleRule) {
  require_static_scale(static_scale, "NVFP4 activation needs a positive finite input global scale (448*6/amax)");
  qdq_nvfp4(x, n, static_scale);
}

}  // namespace detail

void qdq_activation_row(ActMode mode, float* x, std::size_t n, float static_scale, ScaleRule mx_rule) {
  act_mode_traits(mode).qdq(x, n, static_scale, mx_rule);
}

}  // namespace selq::quant
