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

#include "core/codecs.h"
#include "core/codecs_simd.h"
#include "quant/scheme.h"

namespace selq::quant::detail {

// amax(|x|) of each of the n/bw blocks of bw elements (bw in {16, 32}).
void block_amax_simd(const float* x, std::size_t n, std::size_t bw, float* amax);

// E8M0 scale bytes for per-block amax (e8m0_scale_from_amax_ref per block),
// plus the exact power-of-two multipliers: inv = 2^(127-s) (quantize) and
// sc = 2^(s-127) (dequantize). Finite amax only.
void mx_scales_simd(const float* amax, std::size_t nblk, ScaleRule rule, int elem_emax,
                    int elem_mbits, float elem_max, std::uint8_t* sbytes, float* inv, float* sc);

// NVFP4 E4M3 block scales and effective per-block divisors (nvfp4.cpp's
// block_scale_byte / effective_scale). `bf16` selects bf16 rounding of
// amax/6 in the compressed-tensors convention (weight dtype BF16); F16 is not
// handled here.
void nvfp4_scales_simd(const float* amax, std::size_t nblk, bool ct, bool bf16, float global,
                       std::uint8_t* sbytes, float* eff);

// E2M1 codes of v = x / d[b] (divide) or x * d[b], with -0.0 turned into
// +0.0, packed two per byte (low nibble first); dq = value * dqs[b]. Counts
// |v| >= clip_at as clipped. n % bw == 0, bw in {16, 32}.
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

// ---- row entry points (simd = false runs the scalar path) ----

// Finite rows take the SIMD kernels; the scalar paths also handle NaN/Inf.
inline bool row_is_finite(const float* x, std::size_t n) {
  return amax_f32(x, n) <= 3.40282347e38f;  // false for NaN and Inf
}

// One row of `in` elements: codes into w, scale bytes into s.
void mx_row(const SchemeSpec& spec, const float* x, std::int64_t in, std::uint8_t* w,
            std::uint8_t* s, ErrorMetrics& m, bool simd);

struct Nvfp4RowParams {
  bool ct;       // compressed-tensors convention (else ModelOpt)
  DType t;       // weight dtype (CT scale arithmetic)
  float global;  // gs (CT) or weight_scale_2 (ModelOpt)
};
void nvfp4_row(const Nvfp4RowParams& p, const float* x, std::int64_t in, std::uint8_t* w,
               std::uint8_t* s, ErrorMetrics& m, bool simd);

// n elements with one scale s; `ct` is the dtype of the quotient x / s.
// Adds clipped elements (not blocks) and the error sums to m.
void fp8_row(DType ct, const float* x, std::size_t n, float s, std::uint8_t* w, ErrorMetrics& m,
             bool simd);

}  // namespace selq::quant::detail
