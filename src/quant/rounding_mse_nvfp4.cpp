// Rounding `mse` and `weighted` on NVFP4 (quant/rounding_mse.h): the E4M3
// block-scale byte with the least (weighted) squared error per block.
//
// The other searches (rounding_mse.cpp) put a block's elements in vector
// lanes and sum each candidate's lanes at the end. An NVFP4 block has only
// 16 elements, so that sum per candidate costs as much as the candidate's
// errors: here the 8 candidates sit in the 8 lanes of one vector instead
// (GCC vector extensions: elementwise IEEE operations, the same results in
// every SIMD target's copy), one element at a time, four blocks in flight,
// and no sum across lanes is needed (docs/BENCHMARKS.md). The measure is
// the same: each lane's Σ w (x − dq)², exact differences in double, in
// element order, screened first by the same sums in float.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "quant/detail.h"
#include "quant/rounding_mse.h"
#include "quant/rounding_screen.h"

// Compiled once per SIMD target, with -ffp-contract=off (rounding_mse.cpp says why).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/rounding_mse_nvfp4.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace selq::quant::detail {
namespace HWY_NAMESPACE {
namespace {

typedef float V8f __attribute__((vector_size(32)));
typedef std::int32_t V8i __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));

// No function takes or returns a 32-byte vector by value (the ABI differs
// between targets): results go to out.
#define SELQ_SPLAT(v) (V8f{(v), (v), (v), (v), (v), (v), (v), (v)})

// A candidate divisor e of each lane and the bounds its quotients are told by.
struct E2m1Divisor {
  V8f e, e2, e4, e6;  // e, 2e, 4e, 6e (6e rounded)
};

// The E2M1 value of a / e (a >= 0) times e: what the row kernels' E2m1
// (grid_simd-inl.h) gives, RNE saturating at 6, here by adding and
// subtracting a constant whose ulp is the grid's step (0.5 below 2, 1 below
// 4, 2 above), the step and the saturation told from a against 2e, 4e and
// 6e beside the division rather than from the quotient after it, which
// shortens each element's chain of dependent operations (docs/BENCHMARKS.md).
// The same value: a >= 2e exactly when a / e >= 2, and where the rounded
// quotient is 2 although a < 2e, both steps keep 2 (likewise 4); on either
// side of 6e the quotient rounds to 6.
inline void e2m1_dq8(const V8f& a, const E2m1Divisor& s, V8f& out) {
  const V8f c = a < s.e2 ? SELQ_SPLAT(0x1.8p22f) : a < s.e4 ? SELQ_SPLAT(0x1.8p23f) : SELQ_SPLAT(0x1.8p24f);
  const V8f q = a / s.e;
  out = (a < s.e6 ? (q + c) - c : SELQ_SPLAT(6.0f)) * s.e;
}

// err[m][k] = Σ_i w_i (|x_i| − dq_mk(|x_i|))² over the 16 elements of block
// xs[m] (weights ws[m], or 1 where ws is null) for the 8 candidates k in
// lanes. Each lane adds in element order, in T (double: the defining sums;
// float: screened_lane's); the M blocks are independent chains of adds,
// which the core overlaps.
template <class T, int M, class Dq>
inline void sums8(const float* const* xs, const float* const* ws, Dq&& dq, T (*err)[8]) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  V8f acc[M];        // float sums
  V4d lo[M], hi[M];  // double sums: lanes 0-3 and 4-7
  for (int m = 0; m < M; ++m) acc[m] = SELQ_SPLAT(0.0f), lo[m] = hi[m] = V4d{0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < 16; ++i) {
    for (int m = 0; m < M; ++m) {
      const float a = std::fabs(xs[m][i]);
      const V8f x8 = SELQ_SPLAT(a);
      V8f d;
      dq(m, x8, d);
      if constexpr (kFloat) {
        const V8f e = x8 - d;
        acc[m] += ws ? e * e * SELQ_SPLAT(ws[m][i]) : e * e;
      } else {
        const V4f dl = __builtin_shufflevector(d, d, 0, 1, 2, 3), dh = __builtin_shufflevector(d, d, 4, 5, 6, 7);
        const V4d el = static_cast<double>(a) - __builtin_convertvector(dl, V4d);
        const V4d eh = static_cast<double>(a) - __builtin_convertvector(dh, V4d);
        const double w = ws ? static_cast<double>(ws[m][i]) : 1.0;
        lo[m] += ws ? el * el * w : el * el;
        hi[m] += ws ? eh * eh * w : eh * eh;
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < 4; ++k) {
      err[m][k] = kFloat ? acc[m][k] : lo[m][k];
      err[m][4 + k] = kFloat ? acc[m][4 + k] : hi[m][k];
    }
}

// The chosen lane of each of the M blocks: from the float sums where
// screened_lane can tell, else from the double sums. same(m, j, k): lanes j
// and k of block m are the same candidate.
template <int M, class Dq, class Same>
inline void choose_lanes(const float* const* xs, const float* const* ws, float w_max, Dq&& dq, Same&& same,
                         int* lane) {
  bool undecided = !g_mse_screening.load(std::memory_order_relaxed);
  if (!undecided) {
    float f[M][8];
    sums8<float, M>(xs, ws, dq, f);
    for (int m = 0; m < M; ++m) {
      lane[m] = screened_lane(f[m], 0, 8, 16, w_max, [&](int j, int k) { return same(m, j, k); });
      undecided |= lane[m] < 0;
    }
    if (!undecided) return;
  } else {
    for (int m = 0; m < M; ++m) lane[m] = -1;
  }
  double e[M][8];
  sums8<double, M>(xs, ws, dq, e);
  for (int m = 0; m < M; ++m)
    if (lane[m] < 0) lane[m] = best_lane(e[m], 0, 8);
}

}  // namespace

void MseNvfp4Scales(const Nvfp4RowParams& p, const float* x, const float* block_amax, std::size_t nblk,
                    std::uint8_t* sbytes, float* eff) {
  constexpr int M = 4;  // blocks searched together
  // b46: the bytes that map each block maximum to 4 instead of 6 (Four Over
  // Six), the same arithmetic as nearest's bytes.
  thread_local std::vector<std::uint8_t> b46;
  thread_local std::vector<float> b46_eff;  // written by nvfp4_scales_simd, not needed here
  b46.resize(nblk);
  b46_eff.resize(nblk);
  if (!p.ct || p.t != DType::F16)
    nvfp4_scales_simd(block_amax, nblk, p.ct, p.t == DType::BF16, p.global, b46.data(), b46_eff.data(), 4.0f);
  else
    for (std::size_t b = 0; b < nblk; ++b) b46[b] = nvfp4_block_scale_byte(p, block_amax[b], 4.0f);
  const float w_max = p.weights ? largest_weight(p.weights, nblk * 16) : 1.0f;
  // Codes 0x01..0x7E are the positive E4M3 values in increasing order: the
  // candidates are nearest's byte b0 and its neighbours, and b46's.
  const V8i from_b0 = V8i{-1, -1, -1, -1, -1, 0, 0, 0}, step = V8i{0, -1, 1, 2, -2, -1, 0, 1};
  const V8f global = SELQ_SPLAT(p.global);
  for (std::size_t b0i = 0; b0i < nblk; b0i += M) {
    int codes[M][8];
    float e[M][8];
    V8f e8[M];
    const float* xs[M];
    const float* ws[M];
    std::size_t blk[M];
    for (int m = 0; m < M; ++m) {
      // Past the row's end, the last block again (its result is discarded).
      const std::size_t b = blk[m] = std::min(b0i + static_cast<std::size_t>(m), nblk - 1);
      xs[m] = x + b * 16;
      ws[m] = p.weights ? p.weights + b * 16 : nullptr;
      const int b0 = sbytes[b], b4 = b46[b];
      const V8i c = ((from_b0 & b0) | (~from_b0 & b4)) + step;
      const V8i in_range = (c >= 1) & (c <= 0x7E);
      // The E4M3 value of code c (e4m3_value: subnormal below exponent 1), then
      // the divisor it stands for.
      const V8i ex = c >> 3, mant = c & 7;
      const V8f sub = __builtin_convertvector(mant, V8f) * SELQ_SPLAT(0x1p-9f);
      const V8f v = ex == 0 ? sub : (V8f)((ex + 120) << 23 | mant << 20);
      const V8f ev = p.ct ? v / global : v * global;
      const V8i ok = in_range & (ev > SELQ_SPLAT(0.0f)) & (ev < SELQ_SPLAT(std::numeric_limits<float>::infinity()));
      const V8i lane0 = V8i{-1, 0, 0, 0, 0, 0, 0, 0};  // nearest's own, as the row kernel made it
      const V8i keep = ok & ~lane0;
      const V8i code = (keep & c) | (~keep & b0);
      e8[m] = keep ? ev : SELQ_SPLAT(eff[b]);
      std::memcpy(codes[m], &code, sizeof code);
      std::memcpy(e[m], &e8[m], sizeof e8[m]);
    }
    int lane[M];
    E2m1Divisor div[M];
    for (int m = 0; m < M; ++m) div[m] = {e8[m], e8[m] * 2.0f, e8[m] * 4.0f, e8[m] * 6.0f};
    choose_lanes<M>(
        xs, p.weights ? ws : nullptr, w_max, [&](int m, const V8f& a, V8f& d) { e2m1_dq8(a, div[m], d); },
        [&](int m, int j, int k) { return e[m][j] == e[m][k]; }, lane);
    for (int m = 0; m < M && b0i + static_cast<std::size_t>(m) < nblk; ++m) {
      sbytes[blk[m]] = static_cast<std::uint8_t>(codes[m][lane[m]]);
      eff[blk[m]] = e[m][lane[m]];
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace selq::quant::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq::quant::detail {

HWY_EXPORT(MseNvfp4Scales);

void mse_nvfp4_scales(const Nvfp4RowParams& p, const float* x, const float* block_amax, std::size_t nblk,
                      std::uint8_t* sbytes, float* eff) {
  HWY_DYNAMIC_DISPATCH(MseNvfp4Scales)(p, x, block_amax, nblk, sbytes, eff);
}

}  // namespace selq::quant::detail
#endif  // HWY_ONCE
