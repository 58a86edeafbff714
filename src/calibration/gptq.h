#pragma once
// GPTQ (Frantar et al., 2022, arXiv 2210.17323) of one linear weight: the
// columns are rounded one at a time, each rounding's error spread over the
// columns not yet rounded through the inverse Hessian of the layer's inputs
// (H = Σ x xᵀ over calibration rows), so that ‖(W − Q) X‖ rather than
// ‖W − Q‖ is what the rounding keeps small. As the issue asks and engines
// need, the stored format is unchanged: the scales are chosen first, by the
// `weighted` search over the original weight with the Hessian's diagonal as
// the channel weights (quant/gptq_grid.h; `mse` when scales_from_diagonal is
// off), and stay; the
// columns go in static order of decreasing Hessian diagonal (act-order
// without a g_idx: each column keeps its own group's scale); dead inputs
// (zero diagonal) are zeroed; the diagonal is damped by a fraction of its
// mean; updates are batched over blocks of 128 columns. All in double; rows
// in fixed panels of 64 (rows are independent), so the result does not
// depend on the thread count.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "quant/scheme.h"

namespace selq::calibration {

struct GptqOptions {
  double dampening{0.01};            // fraction of the mean Hessian diagonal added to the diagonal
  std::int64_t block_columns{128};   // columns per lazy batch update
  quant::TensorQuantizeOptions quantize;  // the scale search's (an NVFP4 fused group's global_amax)
  // Scales from the `weighted` search with H's diagonal (else `mse`): better
  // output on SmolLM2 in NVFP4 and MXFP4 (docs/QUALITY.md, "gptq").
  bool scales_from_diagonal{true};
  // Also the original rounded to nearest on the same grid (GptqResult::nearest),
  // for the gptq pass's gate (calibration/gptq_gate.h): the grid is at hand here.
  bool with_nearest{false};
};

// The channel weights the scale search takes from a Hessian: its diagonal
// (each input's Σ x²) as floats.
std::vector<float> hessian_diagonal(std::span<const double> hessian, std::int64_t in);

struct GptqResult {
  // [out, in] F32, on the grid of quant::gptq_scale_outputs(spec, weight, options.quantize with
  // channel_weights = hessian_diagonal(hessian) when scales_from_diagonal)
  std::vector<float> weight;
  double dampening{0};        // the fraction used (raised tenfold, up to 3 times, until H is positive definite)
  std::vector<float> nearest;  // [out, in] with options.with_nearest: the original on the grid, each element to nearest
};

// What GPTQ rounds every reader of one input with (fused gate/up, q/k/v
// share it): the act order, the dead inputs and U with (H + λI)⁻¹ = Uᵀ U in
// that order, the dampening λ raised until H + λI is positive definite.
struct GptqInverse {
  std::vector<std::int64_t> perm;
  std::vector<char> dead;
  std::vector<double> u;  // [in, in] row-major upper
  double dampening{0};
};
// Throws BadInput naming `name` when H stays indefinite after dampening.
GptqInverse gptq_inverse(std::span<const double> hessian, std::int64_t in, double dampening, const std::string& name);

// `weight` a 2-D [out, in] float tensor of a kind quant::rounding_takes(Rounding::Gptq, kind);
// `hessian` [in, in] row-major, symmetric (Σ x xᵀ; any positive scale);
// `inverse`: gptq_inverse(hessian, in, options.dampening) when the caller shares
// one between readers of the input (computed here when null).
// Throws BadInput naming the tensor when H stays indefinite after dampening.
GptqResult gptq_round(const quant::SchemeSpec& spec, const TensorView& weight, std::span<const double> hessian,
                      const GptqOptions& options = {}, const GptqInverse* inverse = nullptr);

}  // namespace selq::calibration
