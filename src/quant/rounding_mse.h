#pragma once
// Rounding `mse`: in each block or group, the free parameters (the scale, a
// clip of the range) are chosen among a few candidates to minimise the
// block's squared error Σ (x − dq)², summed in double over the block's
// elements in order, with dq the F32 value the scheme's dequantizer gives
// (screened by float sums in vector lanes first: rounding_mse.cpp, and
// rounding_mse_nvfp4.cpp for NVFP4's short blocks).
// The nearest rounding's choice is always a candidate and is kept unless
// another is strictly better, so no block is ever worse than `nearest`.
// Rounding `weighted` is the same search with each element's squared error
// multiplied by its input channel's weight w (the channel's mean squared
// activation, from `selq calibrate`): Σ w (x − dq)², so a block's error is
// what it adds to the linear's output error E‖(W − Q)x‖² when the input
// channels are uncorrelated (llama.cpp's imatrix idea). Each function takes
// the weights of its elements (null: `mse`).
// On 4-bit INT and MXFP4 grids `mse` has weights too, from the weights
// themselves: 2 + x²/mean(x²) over the block or group (llama.cpp's σ² + x²
// without an imatrix, divided by the block's mean square so that it cannot
// overflow). There the plain sum gave up each block's few largest weights to
// fit its many small ones and cost KL (2.07x nearest's for INT4 g128 on
// Qwen2.5-Coder); NVFP4 and the 8-bit grids measured better with the plain
// sum (docs/QUALITY.md, "The data-free measure").
//
// Each function takes the scales the scale rule chose (the arrays the row
// kernels then encode with) and replaces them in place: scale selection is
// here, the encoding stays in each kind's row kernels, which run the same
// SIMD code for every rounding. The searches go by scale family (E8M0,
// NVFP4's E4M3, an INT range, an FP8 clip), so a new kind whose scales are
// of a family already here touches no rounding. Everything is per block, so
// the bytes do not depend on the thread count, the memory budget or how a
// tensor is split. A row holding NaN/Inf (quantized only with
// --allow-non-finite) keeps nearest's scales.
//
// Candidates (docs/RECIPES.md, "Rounding"):
//   MXFP4/MXFP8      the E8M0 exponent e (the rule's), e − 1 and e + 1
//   NVFP4            E4M3 block-scale bytes b0 − 2 ... b0 + 2 (b0 nearest's)
//                    and b46 − 1 ... b46 + 1, b46 the byte that maps the
//                    block max to 4 instead of 6 ("Four Over Six", arXiv
//                    2512.02010); the tensor's global scale is unchanged
//   INT (any)        the range r·[min, max] for r = 1 (nearest), 7.5/7 (int4;
//                    127.5/127 for int8: the largest element onto qmax), and
//                    r = 0.95, 0.9, ..., 0.7 (int4) or 0.995, ..., 0.97 (int8)
//   FP8 channel/block the scale of r·amax, r = 1, 0.975, ..., 0.825
//   E4M3 under an    the exponent e − 1, e, e + 1
//   E8M0 row scale
//   FP8 per tensor   one scale for the whole tensor: not searched (= nearest)
#include <cstddef>
#include <cstdint>

#include "quant/detail_simd.h"
#include "quant/scheme.h"

namespace selq::quant::detail {

// MX: sbytes/inv/sc as mx_scales_simd made them, for nblk blocks of 32.
void mse_mx_scales(bool fp4, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes, float* inv,
                   float* sc);

// NVFP4: sbytes/eff as nvfp4_scales_simd made them, for nblk blocks of 16
// whose maxima are block_amax (weights: p.weights).
void mse_nvfp4_scales(const Nvfp4RowParams& p, const float* x, const float* block_amax, std::size_t nblk,
                      std::uint8_t* sbytes, float* eff);

// INT: the groups' scales and zero points as int_group_qparams made them from
// the groups' min(0, min x) / max(0, max x) (weights: p.weights).
void mse_int_scales(const IntRowParams& p, float qmin, float qmax, const float* x, std::int64_t in,
                    const float* mn, const float* mx, float* s, float* zp);

// FP8 with one scale over n elements of amax `amax` (a channel or a 2-D
// block): the chosen scale, `nearest` unless another is strictly better.
float mse_fp8_scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax, float nearest);

// E4M3 elements under one E8M0 (power-of-two) scale over n elements: the
// chosen scale byte, `nearest` unless another is strictly better.
std::uint8_t mse_e4m3_e8m0_byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest);

// Whether `mse` weighs each element's error by its magnitude on this scheme
// (above): 4-bit INT (group or channel) and MXFP4. The searches below decide
// the same from what they are given (MX: fp4; INT: p.bits).
bool mse_weighs_magnitude(const SchemeSpec& spec);

// `mse`'s magnitude weights of n elements in blocks of `block` (the last may
// be shorter): out[i] = 2 + x[i]² · (len / Σ x²) of its block, 2 where the
// block is all zero; in double (the sum in a fixed order of eight interleaved
// partial sums), then rounded to float.
void magnitude_weights(const float* x, std::size_t n, std::size_t block, float* out);

// Whether the searches screen with float sums first (the default; the choice
// is the same either way): tests compare both. Returns the previous setting.
bool set_mse_screening(bool on);

}  // namespace selq::quant::detail
