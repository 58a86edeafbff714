#pragma once
// Fused SIMD row kernels for the weight schemes (Highway, runtime dispatch;
// quant/kernels_simd.cpp). Each is bit-exact in its codes and scales with
// the scalar row paths in mx.cpp / nvfp4.cpp / fp8.cpp, which remain as the
// fallback for rows holding NaN/Inf and as the oracle in
// tests/unit/quant/test_kernels_simd.cpp.
//
// Preconditions shared by all kernels: every x is finite (callers route
// non-finite rows to the scalar path), arrays need no alignment, and the
// per-block arrays (amax, d, dqs) hold one entry per block.
//
// The metrics are accumulated in float lanes over windows of at most 512
// elements and then added to `m` in double, lane by lane in a fixed order,
// so they depend only on the row's data, never on the thread count.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "core/codecs.h"
#include "core/codecs_simd.h"
#include "quant/scheme.h"

namespace selq::quant::detail {

// amax(|x|) of each of the n/bw blocks of bw elements (n % bw == 0). A block
// holding NaN gets a NaN amax, one holding Inf (and no NaN) gets Inf.
void block_amax_simd(const float* x, std::size_t n, std::size_t bw, float* amax);

// BF16 -> F32 of n elements (h 2-byte aligned) fused with block_amax_simd.
void load_bf16_block_amax_simd(const std::uint16_t* h, std::size_t n, std::size_t bw, float* out,
                               float* amax);

// Source row [first, first + n) as F32 together with the amax of each of its
// bw-element blocks, in one pass over the source where possible. Returns the
// row: `buf` (n floats), or the source itself for aligned F32 input.
const float* load_row_block_amax(DType t, const std::uint8_t* data, std::uint64_t first,
                                 std::size_t n, std::size_t bw, float* buf, float* amax);

// span_amax (detail.h) without staging the data through an F32 buffer for
// BF16 and aligned F32 sources; identical result (non-finite spans are
// handed to span_amax itself, whose NaN it returns).
float span_amax_fast(const TensorView& src, std::uint64_t first, std::uint64_t count);

// True when every one of the nblk block maxima is finite (the row has no
// NaN/Inf).
inline bool all_finite(const float* amax, std::size_t nblk) {
  bool ok = true;
  for (std::size_t b = 0; b < nblk; ++b) ok &= amax[b] <= 3.40282347e38f;
  return ok;
}

// E8M0 scale bytes for per-block amax (e8m0_scale_from_amax_ref per block),
// plus the exact power-of-two multipliers: inv = 2^(127-s) (quantize) and
// sc = 2^(s-127) (dequantize). Finite amax only.
void mx_scales_simd(const float* amax, std::size_t nblk, ScaleRule rule, int elem_emax,
                    int elem_mbits, float elem_max, std::uint8_t* sbytes, float* inv, float* sc);

// NVFP4 E4M3 block scales and effective per-block divisors (nvfp4.cpp's
// block_scale_byte / effective_scale) that map each block maximum to
// `target` (6; rounding mse's Four Over Six candidates: 4). `bf16` selects
// bf16 rounding of amax/target in the compressed-tensors convention (weight
// dtype BF16); F16 is not handled here.
void nvfp4_scales_simd(const float* amax, std::size_t nblk, bool ct, bool bf16, float global,
                       std::uint8_t* sbytes, float* eff, float target = 6.0f);

// E2M1 codes of v = x / d[b] (divide) or x * d[b], with -0.0 turned into
// +0.0, packed two per byte (low nibble first); dq = value * dqs[b]. Counts
// |v| >= clip_at as clipped. n % bw == 0, bw in {16, 32}. A null `packed`
// stores no codes and changes nothing else (the same instructions for the
// values and metrics): measure_weight's path, here and in the kernels below.
void e2m1_blocks_simd(const float* x, std::size_t n, std::size_t bw, const float* d,
                      const float* dqs, bool divide, float clip_at, std::uint8_t* packed,
                      ErrorMetrics& m);

// E4M3FN (saturating) codes of v = x / d[b] (divide) or x * d[b]; with
// round_bf16 the quotient is rounded to bf16 first (torch's bf16 division).
// dq = value * dqs[b]; |v| >= clip_at counts as clipped. Either bw == n (one
// block, any n) or n % bw == 0 and bw % 16 == 0.
void e4m3_blocks_simd(const float* x, std::size_t n, std::size_t bw, const float* d,
                      const float* dqs, bool divide, bool round_bf16, float clip_at,
                      std::uint8_t* codes, ErrorMetrics& m);

// Per-group min(0, min x) and max(0, max x) of the n/gw groups of gw
// elements (any gw >= 1 dividing n), as int.cpp's scalar loop computes them.
void block_minmax_simd(const float* x, std::size_t n, std::size_t gw, float* mn, float* mx);

// Integer codes of groups of gw elements (n % gw == 0) with per-group scale
// s[g] and zero point zp[g] (asym only), compressed-tensors order of
// operations: v = T(x / s) [T(v + zp)], q = rne(clamp(v, qmin, qmax)), with T
// bf16 rounding when round_bf16, else f32. codes[i] = byte of (q + offset);
// dq = (q - zp) * s feeds the metrics. Adds blocks, clipped elements/blocks
// and the error sums to m.
void int_groups_simd(const float* x, std::size_t n, std::size_t gw, const float* s,
                     const float* zp, bool asym, bool round_bf16, float qmin, float qmax,
                     int offset, std::uint8_t* codes, ErrorMetrics& m);

// ---- row entry points (simd = false runs the scalar path) ----
// The code outputs (w, codes) may be null: the metrics are the same, nothing
// is stored (measure_weight).

// Finite rows take the SIMD kernels; the scalar paths also handle NaN/Inf.
inline bool row_is_finite(const float* x, std::size_t n) {
  return amax_f32(x, n) <= 3.40282347e38f;  // false for NaN and Inf
}

// One row of `in` elements: codes into w, scale bytes into s. The SIMD paths
// take the block maxima from `block_amax` when given (block_amax_simd of x).
// `weights`: the input channels' weights for Rounding::Weighted (else null).
void mx_row(const SchemeSpec& spec, const float* x, std::int64_t in, std::uint8_t* w,
            std::uint8_t* s, ErrorMetrics& m, bool simd, const float* block_amax = nullptr,
            const float* weights = nullptr);

struct Nvfp4RowParams {
  bool ct;       // compressed-tensors convention (else ModelOpt)
  DType t;       // weight dtype (CT scale arithmetic)
  float global;  // gs (CT) or weight_scale_2 (ModelOpt)
  Rounding rounding{Rounding::Nearest};  // how block scales are chosen (quant/rounding_mse.h)
  const float* weights{nullptr};         // Weighted: the row's input-channel weights
  // TensorQuantizeOptions::nvfp4_pow2_scales: global = 2^(8 - top) (CT) or
  // 2^(top - 8) (ModelOpt), top the largest block exponent; else nullopt.
  std::optional<int> pow2_top{};
};
// The E4M3 block-scale byte for a block of amax `amax_blk` whose maximum is
// mapped to `target` (6 for the scale rule; Four Over Six's 4), and the
// divisor a byte stands for (nvfp4.cpp).
std::uint8_t nvfp4_block_scale_byte(const Nvfp4RowParams& p, float amax_blk, float target = 6.0f);
float nvfp4_effective_scale(const Nvfp4RowParams& p, std::uint8_t b);
void nvfp4_row(const Nvfp4RowParams& p, const float* x, std::int64_t in, std::uint8_t* w,
               std::uint8_t* s, ErrorMetrics& m, bool simd, const float* block_amax = nullptr);
// The parameters of the `count` elements from `first` (one matrix: a 2-D
// weight or one expert): their global scale from options.global_amax, else
// from their own amax.
Nvfp4RowParams nvfp4_row_params(const SchemeSpec& spec, const TensorView& src, const TensorQuantizeOptions& options,
                                std::uint64_t first, std::uint64_t count);

struct Fp8Params {
  DType t;   // source dtype
  DType sd;  // stored scale dtype
  DType mt;  // dtype of the scale arithmetic
  DType ct;  // dtype of the quotient x / s (torch promotion of t and sd)
  Rounding rounding{Rounding::Nearest};  // how the scale is chosen (quant/rounding_mse.h)
  const float* weights{nullptr};         // Weighted: the row's input-channel weights
};
Fp8Params fp8_params(const SchemeSpec& spec, DType t);
// The scale the rule gives for `amax` (amax/448 in the scale's arithmetic,
// rounded to the stored dtype; zero -> eps).
float fp8_scale_for_amax(const Fp8Params& p, float amax);
// One row of FP8 per output channel, whose amax is `amax` (the load's bit-
// pattern amax; recomputed when !finite): codes into w, the row's metrics
// merged into m as one block. Returns the scale (to store in p.sd).
float fp8_channel_row(const Fp8Params& p, const float* row, std::size_t n, float amax, bool finite, std::uint8_t* w,
                      ErrorMetrics& m);

// n elements with one scale s; `ct` is the dtype of the quotient x / s.
// Adds clipped elements (not blocks) and the error sums to m.
void fp8_row(DType ct, const float* x, std::size_t n, float s, std::uint8_t* w, ErrorMetrics& m,
             bool simd);

struct IntRowParams {
  int bits;               // 4 or 8
  bool sym;
  DType sd, mt, ct;       // scale dtype, scale arithmetic dtype, quotient dtype
  std::int64_t gw;        // group width (in for per-channel)
  int offset;             // added to each code byte: 2^(b-1) when packed, else 0
  Rounding rounding{Rounding::Nearest};  // how group scales are chosen (quant/rounding_mse.h)
  const float* weights{nullptr};         // Weighted: the row's input-channel weights
};
// Scale (rounded to its stored dtype) and zero point of one group whose
// min(0, min x) is mn and max(0, max x) is mx (compressed-tensors'
// calculate_qparams; int.cpp).
void int_group_qparams(const IntRowParams& p, float qmin, float qmax, float mn, float mx, float& s, float& zp);
// One row of `in` elements: per-group scales (already rounded to sd) and zero
// points into s / zp, one code byte per element into codes (see
// int_groups_simd). Non-finite rows must take simd = false.
void int_row(const IntRowParams& p, const float* x, std::int64_t in, std::uint8_t* codes,
             float* s, float* zp, ErrorMetrics& m, bool simd);
// The stored scale and zero point of group gi of row r of expert e
// (`scales`/`zps`: the Scale and ZeroPoint outputs; zps null when symmetric).
void stored_group_qparams(const SchemeSpec& spec, std::int64_t out, std::int64_t in, const std::uint8_t* scales,
                          const std::uint8_t* zps, std::int64_t e, std::int64_t r, std::int64_t gi, float& s,
                          float& zp);
// The parameters of an IntChannel/IntGroup scheme for a source of dtype t
// whose rows have `in` elements.
IntRowParams int_row_params(const SchemeSpec& spec, DType t, std::int64_t in);

}  // namespace selq::quant::detail
