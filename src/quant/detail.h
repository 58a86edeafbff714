#pragma once
// Internal helpers shared by the scheme implementations (not part of the
// public quant API). The fast scalar codecs here are checked bit-exact against
// the `*_ref` oracles in core/codecs.h by tests/unit/quant/test_schemes.cpp.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "core/codecs.h"
#include "core/error.h"
#include "quant/rounding_traits.h"
#include "quant/scheme.h"

namespace selq::quant::detail {

// ---- element codecs (hot loops) ----

// E2M1 with round-to-nearest-even and saturation at ±6. The sign bit is
// `v < 0`, not signbit(v): compressed-tensors (sign(x)*|q|) and ModelOpt
// (`weight < 0`) both write +0 (0x0) for a -0.0 quotient, while a small
// negative that rounds to zero keeps its sign (0x8). NaN -> 0x7 | sign, like
// the reference (NaN only reaches here when non-finite weights are allowed).
inline std::uint8_t e2m1_code(float v) {
  const float a = std::fabs(v);
  const std::uint8_t s = v < 0.0f ? 0x8 : 0x0;
  // Midpoints between neighbours; ">=" where the upper neighbour has the even
  // mantissa, ">" where the lower one has.
  const std::uint8_t c = static_cast<std::uint8_t>((a > 0.25f) + (a >= 0.75f) + (a > 1.25f) +
                                                   (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) +
                                                   (a > 5.0f) + 7 * (a != a));
  return static_cast<std::uint8_t>(s | c);
}

inline constexpr float kE2M1Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E4M3FN, saturating at ±448 (compressed-tensors clamps before the cast;
// torch >= 2.13 saturates too). Bit manipulation instead of frexp/ldexp so
// that the loop vectorizes; identical to f32_to_e4m3_sat_ref.
inline std::uint8_t e4m3_sat_code(float v) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  const std::uint8_t s = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  u &= 0x7FFFFFFFu;
  if (u > 0x7F800000u) return static_cast<std::uint8_t>(s | 0x7F);
  if (u >= 0x43E00000u) return static_cast<std::uint8_t>(s | 0x7E);  // >= 448, Inf
  if (u < 0x3C800000u) {  // below 2^-6: fixed quantum 2^-9; the add rounds RNE
    const float t = std::bit_cast<float>(u) * 512.0f + 8388608.0f;
    return static_cast<std::uint8_t>(s | (std::bit_cast<std::uint32_t>(t) - 0x4B000000u));
  }
  u += 0x7FFFFu + ((u >> 20) & 1u);
  return static_cast<std::uint8_t>(s | ((u - (120u << 23)) >> 20));
}

const float* e4m3_table();  // 256 decoded values (NaN for 0x7F/0xFF)
inline float e4m3_value(std::uint8_t b) { return e4m3_table()[b]; }

// 2^k for k in [-127, 127] (an E8M0 scale, k = byte − 127, or its inverse),
// built from bits (ldexp is a libm call per block).
inline float pow2(int k) {
  return k >= -126 ? std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23)
                   : std::bit_cast<float>(0x00400000u);
}

// ---- compute-dtype emulation ----
// The reference tools do scale arithmetic in the weight's own dtype (torch
// bf16 ops compute in f32 and round the result to bf16); we reproduce that by
// rounding each intermediate result to `t`.
inline float round_to(DType t, float v) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16_ref(v));
    case DType::F16: return f16_to_f32(f32_to_f16_ref(v));
    default: return v;
  }
}
// torch type promotion between two float tensor dtypes.
inline DType promote(DType a, DType b) { return a == b ? a : DType::F32; }
// torch.finfo(t).eps: compressed-tensors replaces a zero scale with it.
inline float dtype_eps(DType t) {
  switch (t) {
    case DType::BF16: return 0x1p-7f;
    case DType::F16: return 0x1p-10f;
    default: return std::numeric_limits<float>::epsilon();
  }
}
// Smallest normal of t (generate_gparam clamps amax up to it).
inline float dtype_tiny(DType t) { return t == DType::F16 ? 0x1p-14f : 0x1p-126f; }

// RNE to bf16 and back, without the NaN branch (callers pass finite values
// or infinities, which this keeps).
inline float round_bf16(float v) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(v);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return std::bit_cast<float>(u & 0xFFFF0000u);
}
inline float round_to_fast(DType t, float v) {
  if (t == DType::F32) return v;
  if (t == DType::BF16) return round_bf16(v);
  return round_to(t, v);
}

// amax(|x|) of `count` source elements starting at element `first`;
// deterministic for any thread count (max is exact).
float span_amax(const TensorView& src, std::uint64_t first, std::uint64_t count);

void store_float(DType t, std::uint8_t* base, std::uint64_t idx, float v);
// Scales are read back with load_float_element (core/tensor.h), which also
// takes F64; dequantize checks once that the scale dtype is one selq writes.
void require_scale_dtype(DType t);

// Converts `count` source elements starting at element `first` to F32. Fast
// paths for F32/BF16/F16.
void load_row(DType t, const std::uint8_t* data, std::uint64_t first, std::uint64_t count,
              float* out);

// ---- geometry ----
struct Geometry {
  std::int64_t experts{1};
  std::int64_t out{0};
  std::int64_t in{0};
  bool three_d{false};
};
// Validates rank and divisibility for `spec` (throws Unsupported naming what
// each dialect expects).
Geometry geometry_for(const SchemeSpec& spec, const Shape& shape, const std::string& tensor = {});

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Scale-group width along `in` for block schemes.
int group_width(const SchemeSpec& spec, std::int64_t in);

// ---- metrics ----
inline void accumulate(ErrorMetrics& m, float x, float dq) {
  const double xd = x, dd = dq, e = xd - dd;
  m.sum_sq_ref += xd * xd;
  m.sum_sq_err += e * e;
  m.sum_dot += xd * dd;
  m.sum_sq_dq += dd * dd;
  const double ae = std::fabs(e);
  if (ae > m.max_abs_err) m.max_abs_err = ae;
}

// Adds the error sums of n elements (x reference, dq dequantized) to m.
// Float lane accumulators per call keep the loop vectorizable; callers pass
// at most a few hundred elements so the float partials stay accurate.
inline void block_metrics(const float* x, const float* dq, std::size_t n, ErrorMetrics& m) {
  constexpr int L = 8;
  float ssr[L] = {}, sse[L] = {}, dot[L] = {}, ssd[L] = {}, mx[L] = {};
  const std::size_t main_end = n - n % L;
  for (std::size_t i = 0; i < main_end; i += L) {
    for (int l = 0; l < L; ++l) {
      const float a = x[i + l], b = dq[i + l], e = a - b;
      ssr[l] += a * a;
      sse[l] += e * e;
      dot[l] += a * b;
      ssd[l] += b * b;
      const float ae = std::fabs(e);
      mx[l] = ae > mx[l] ? ae : mx[l];
    }
  }
  for (std::size_t i = main_end; i < n; ++i) {
    const float a = x[i], b = dq[i], e = a - b;
    ssr[0] += a * a;
    sse[0] += e * e;
    dot[0] += a * b;
    ssd[0] += b * b;
    mx[0] = std::fabs(e) > mx[0] ? std::fabs(e) : mx[0];
  }
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  for (int l = 0; l < L; ++l) {
    s0 += ssr[l];
    s1 += sse[l];
    s2 += dot[l];
    s3 += ssd[l];
    s4 = mx[l] > s4 ? mx[l] : s4;
  }
  m.sum_sq_ref += s0;
  m.sum_sq_err += s1;
  m.sum_dot += s2;
  m.sum_sq_dq += s3;
  if (s4 > m.max_abs_err) m.max_abs_err = s4;
  m.elements += n;
}

// Scalar row tail shared by the MX and NVFP4 paths: multiply the decoded
// elements of each `block`-wide block by its scale, then accumulate metrics in
// 256-element chunks (the order the SIMD kernels use, so sums match).
inline void scale_blocks_and_measure(const float* x, float* dq, const float* block_scales, std::int64_t in,
                                     int block, ErrorMetrics& m) {
  for (std::int64_t b = 0; b < in / block; ++b) {
    const float sc = block_scales[b];
    float* d = dq + b * block;
    for (int i = 0; i < block; ++i) d[i] *= sc;
  }
  for (std::int64_t c = 0; c < in; c += 256)
    block_metrics(x + c, dq + c, static_cast<std::size_t>(std::min<std::int64_t>(256, in - c)), m);
}

// Throws BadInput naming the tensor and the flat element index of the first
// non-finite value in [v, v+n) (whose first element has flat index `base`).
void check_finite(const float* v, std::size_t n, std::uint64_t base, const TensorView& src,
                  const TensorQuantizeOptions& options);

// Rows per parallel task of the row-wise kinds (FP8 per tensor/channel and
// its E8M0 variant share kFp8ChunkRows): the boundaries of their metric
// pieces, which measure_weight reproduces. Multiples of these divide 16.
inline constexpr std::int64_t kMxChunkRows = 16, kNvfp4ChunkRows = 16, kFp8ChunkRows = 8, kIntChunkRows = 16;

// Runs body(first_row, end_row, metrics) over row chunks of `chunk` rows in
// parallel and merges the per-chunk metrics in chunk order, so results do not
// depend on the thread count; with `pieces`, appends them there instead.
template <class Body>
void for_row_chunks(std::int64_t rows, std::int64_t chunk, ErrorMetrics& total, std::vector<ErrorMetrics>* pieces,
                    Body&& body);

// ---- per-scheme entry points (one expert matrix at a time) ----
// `src` points at the expert's first element (element index `base`); `outs`
// are the whole output buffers and `e` selects the expert slice.
struct MatrixJob {
  const SchemeSpec* spec;
  const TensorView* src;
  const TensorQuantizeOptions* options;
  Geometry g;
  std::int64_t e;  // expert index
  std::span<std::span<std::uint8_t>> outs;
  std::vector<ErrorMetrics>* pieces;  // a 2-D block's metric pieces (TensorQuantizeOptions::pieces)
};
// How the rounding's row chooses scales (quant/rounding_traits.h): searched
// (quant/rounding_mse.h), the rule's, or the ones already in the outputs.
inline bool searches_scales(Rounding r) { return scale_choice(r) == ScaleChoice::Searched; }
inline bool keeps_given_scales(Rounding r) { return scale_choice(r) == ScaleChoice::Given; }

// The input-channel weights of a rounding whose row needs input moments, for
// the job's matrix (its expert's slice of a 3-D stack); null for the others.
inline const float* channel_weights_of(const MatrixJob& job) {
  if (rounding_input(job.spec->rounding.value) != RoundingInput::InputMoments || job.options->channel_weights.empty())
    return nullptr;
  return job.options->channel_weights.data() + (job.g.three_d ? job.e * job.g.in : 0);
}
// Each kind's quantize, dequantize and row kernels are declared beside its
// row in quant/scheme_traits.cpp, the one place that takes them.

// ---- activation quantize-dequantize, one per ActMode row (activation.cpp) ----
// qdq_activation_row's arguments; a mode ignores what it does not use.
void qdq_act_none(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_fp8_dynamic(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_fp8_group128(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_fp8_static(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_mxfp4(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_mxfp8(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);
void qdq_act_nvfp4(float* x, std::size_t n, float static_scale, ScaleRule mx_rule);

}  // namespace selq::quant::detail

#include "quant/detail_parallel.h"
#include "quant/detail_simd.h"
#include "quant/rounding_traits.h"

namespace selq::quant::detail {
// The row loop of the one-scale-per-row kinds (FP8 per tensor and per
// channel, FP8 E8M0): over the job's expert matrix in chunks of `chunk` rows
// (for_row_chunks), loads each row as F32 together with its amax (one block:
// exact for a finite row, and it decides finiteness), has check_finite refuse
// a non-finite row unless allowed, and calls
// row_fn(r, row, amax, finite, m) with the chunk's metrics m.
template <class RowFn>
void for_each_loaded_row(const MatrixJob& job, std::int64_t chunk, ErrorMetrics& total, RowFn&& row_fn) {
  const std::int64_t in = job.g.in, out = job.g.out;
  const DType t = job.src->info->dtype;
  const std::uint8_t* src = job.src->bytes.data();
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * out * in);
  for_row_chunks(out, chunk, total, job.pieces, [&](std::int64_t r0, std::int64_t r1, ErrorMetrics& m) {
    std::vector<float> buf(static_cast<std::size_t>(in));
    for (std::int64_t r = r0; r < r1; ++r) {
      const std::uint64_t base = base0 + static_cast<std::uint64_t>(r * in);
      float amax = 0.0f;
      const float* row = load_row_block_amax(t, src, base, buf.size(), buf.size(), buf.data(), &amax);
      const bool finite = all_finite(&amax, 1);
      if (!finite) check_finite(row, buf.size(), base, *job.src, *job.options);  // throws unless allowed
      row_fn(r, row, amax, finite, m);
    }
  });
}

// Convention-dependent per-tensor NVFP4 scale for a tensor (or fused group)
// of amax `amax` whose arithmetic dtype is `t` (see nvfp4.cpp).
float nvfp4_global_scale(NvfpConvention conv, DType t, float amax);
}  // namespace selq::quant::detail
