#pragma once
// The grid a quantized weight's scales put each element on, read back from
// its output tensors: GPTQ (calibration/gptq.h) rounds column by column onto it,
// and quantize_weight with Rounding::Gptq then stores the result with those
// same scales (the kernels keep what `outs` holds).
#include <cstdint>
#include <span>
#include <vector>

#include "quant/scheme.h"

namespace selq::quant {

class ElementGrid {
 public:
  // `spec` a kind rounding_takes(Rounding::Gptq, ·), `shape` a 2-D [out, in] weight, `outs` its
  // quantize_weight outputs (only the scale, global and zero-point ones are read).
  ElementGrid(const SchemeSpec& spec, const Shape& shape, std::span<const std::span<const std::uint8_t>> outs);

  // The grid value nearest to v at row r, column c (round to nearest even on
  // the element format, saturating; int codes clamped to their range).
  float nearest(std::int64_t r, std::int64_t c, float v) const;

  std::int64_t out() const { return out_; }
  std::int64_t in() const { return in_; }

 private:
  enum class Elements { E2M1, E4M3, Int };
  Elements elements_{Elements::E2M1};
  std::int64_t out_{0}, in_{0}, block_{1};
  float qmin_{0}, qmax_{0};
  std::vector<float> scale_;  // [out, in / block]: a value is (code - zero) * scale
  std::vector<float> zero_;   // int asymmetric; else empty
};

// The scales GPTQ keeps: `spec`'s outputs for `original` quantized with the
// `weighted` search when options.channel_weights are given (GPTQ passes its
// Hessian's diagonal: each input channel's Σ x²), else with `mse`, in fresh buffers.
std::vector<std::vector<std::uint8_t>> gptq_scale_outputs(const SchemeSpec& spec, const TensorView& original,
                                                          const TensorQuantizeOptions& options = {});

// Stores GPTQ's result: `outs` gets the scales gptq_scale_outputs chooses for
// `original` (with the same options) and the codes of `rounded` (GPTQ's weights, on that grid) with
// them; `metrics` compares the stored values with `original`. Throws Internal
// naming the tensor when a value of `rounded` is not on the grid (a GPTQ
// result for other scales). `spec` rounds gptq; options as quantize_weight's
// (with `pieces`, one per row).
void store_gptq_weights(const SchemeSpec& spec, const TensorView& original, const TensorView& rounded,
                        std::span<std::span<std::uint8_t>> outs, ErrorMetrics& metrics,
                        const TensorQuantizeOptions& options = {});

}  // namespace selq::quant
