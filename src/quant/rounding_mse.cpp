// Roundings `mse` and `weighted` (quant/rounding_mse.h): per block, the
// candidate scale with the least (weighted) squared error, nearest's kept on ties.
//
// Each candidate's error is computed the way the row kernels encode (the
// same quotient, the same rounding onto the element grid, the same F32
// product for the dequantized value), so the error the search compares is
// the error the stored block has. The candidates of a block are evaluated
// side by side, one per lane of an 8-lane vector (GCC vector extensions:
// elementwise IEEE operations, the same results in every SIMD target's
// copy), one element at a time. The choice is defined by each lane's sum
// of squares (x − dq)², exact differences in double, in element order: the
// plain loop's sum, bit for bit, on every machine; lane 0 is nearest's
// choice and the first lane with the least sum wins, so ties keep nearest.
//
// The sums are first taken in float (no conversions, twice the lanes per
// register; docs/BENCHMARKS.md has what it buys). A float sum is within
// a known bound of the double one (screened_lane); where the least float sum
// beats every other candidate by more than both bounds, the double sums
// would choose the same lane. Only the rare blocks whose best two are that
// close (or zero, or out of float range) are summed again in double.
#include "quant/rounding_mse.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "quant/detail.h"
#include "quant/rounding_screen.h"

// Highway compiles this file once per SIMD target (foreach_target.h
// re-includes it) and HWY_DYNAMIC_DISPATCH picks the best at run time, so
// the searches, their helpers and lambdas all run at the CPU's width. The
// file is built with -ffp-contract=off: a square contracted into its sum
// would change the sums, so the choice, and the bytes, are the same on
// every machine.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/rounding_mse.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#ifndef SELQ_ROUNDING_MSE_SHARED
#define SELQ_ROUNDING_MSE_SHARED
namespace selq::quant::detail {
extern std::atomic<bool> g_mse_screening;  // set_mse_screening's
}  // namespace selq::quant::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace selq::quant::detail {
namespace HWY_NAMESPACE {

namespace {

typedef float V8f __attribute__((vector_size(32)));
typedef std::int32_t V8i __attribute__((vector_size(32)));
typedef std::uint32_t V8u __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));

// No function takes or returns a 32-byte vector by value (the ABI differs
// between targets): results go to out.
#define SELQ_SPLAT(v) (V8f{(v), (v), (v), (v), (v), (v), (v), (v)})
#define SELQ_SPLAT_U(v) (V8u{(v), (v), (v), (v), (v), (v), (v), (v)})

inline void load8(const float* p, V8f& v) { std::memcpy(&v, p, sizeof v); }

// The E2M1 magnitude a (>= 0) rounds to: RNE at the midpoints, as
// e2m1_code, saturating at 6. The grid's step is 0.5 below 2, 1 below 4 and
// 2 above, so a rounds to a multiple of its step by adding and subtracting
// a constant whose ulp is that step (equal to the chain of comparisons the
// codes take for every non-negative float, +inf included; checked once over
// all of them).
inline void e2m1_mag8(const V8f& a, V8f& out) {
  const V8f c = a < SELQ_SPLAT(2.0f) ? SELQ_SPLAT(0x1.8p22f) : a < SELQ_SPLAT(4.0f) ? SELQ_SPLAT(0x1.8p23f)
                                                                                     : SELQ_SPLAT(0x1.8p24f);
  const V8f q = (a + c) - c;
  out = q < SELQ_SPLAT(6.0f) ? q : SELQ_SPLAT(6.0f);
}

// The E4M3FN magnitude a (>= 0) rounds to, saturating at 448 (the SIMD E4m3).
inline void e4m3_mag8(const V8f& a, V8f& out) {
  const V8u u = (V8u)a;
  const V8u mag = u < SELQ_SPLAT_U(0x43E00000u) ? u : SELQ_SPLAT_U(0x43E00000u);
  const V8u nrm = (mag + SELQ_SPLAT_U(0x7FFFFu) + ((mag >> 20) & SELQ_SPLAT_U(1u))) & SELQ_SPLAT_U(~0xFFFFFu);
  const V8f sub = ((V8f)mag + SELQ_SPLAT(16384.0f)) - SELQ_SPLAT(16384.0f);  // quantum 2^-9 below 2^-6
  out = mag < SELQ_SPLAT_U(0x3C800000u) ? sub : (V8f)nrm;
}

// RNE of finite lanes to bf16 (torch's bf16 quotient), as f32, in place.
inline void bf16_8(V8f& v) {
  const V8u u = (V8u)v;
  v = (V8f)((u + SELQ_SPLAT_U(0x7FFFu) + ((u >> 16) & SELQ_SPLAT_U(1u))) & SELQ_SPLAT_U(0xFFFF0000u));
}

// The quotient as the kernels form it in dtype ct (F32 or BF16; F16 has
// no vector path here), in place.
inline void in_dtype(DType ct, V8f& v) {
  if (ct == DType::BF16) bf16_8(v);
}

// 2^k for k in [-127, 127] (mx.cpp's pow2).
inline float pow2(int k) {
  return k >= -126 ? std::bit_cast<float>(static_cast<std::uint32_t>(k + 127) << 23)
                   : std::bit_cast<float>(0x00400000u);
}

// err[m][k] = Σ_i w_i (x_i − dq_mk(x_i))² over n elements for M vectors m
// of 8 lanes k: lanes 0-3 over xa[m] (weights wa[m]), lanes 4-7 over xb[m]
// (wb[m]) (one block's 8 candidates, or two blocks' 4); w_i = 1 when wa is
// null (`mse`), else the input channel's weight (`weighted`). With kAbs, x_i
// is |x_i| and dq its magnitude (the kernels' grids are symmetric). dq(m, v,
// d) gets x_i in every lane of its half and sets d. Each lane adds in element
// order, in T (double: the defining sums; float: screened_lane's); the M
// vectors are independent chains of adds, which the core overlaps.
template <class T, bool kAbs, int M, class Dq>
inline void sse8_multi(const float* const* xa, const float* const* xb, const float* const* wa,
                       const float* const* wb, std::size_t n, Dq&& dq, T (*err)[8]) {
  constexpr bool kFloat = std::is_same_v<T, float>;
  V8f acc[M];       // float sums: all 8 lanes
  V4d lo[M], hi[M];  // double sums: lanes 0-3 and 4-7
  for (int m = 0; m < M; ++m) acc[m] = SELQ_SPLAT(0.0f), lo[m] = hi[m] = V4d{0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < n; ++i) {
    for (int m = 0; m < M; ++m) {
      const float a = kAbs ? std::fabs(xa[m][i]) : xa[m][i], b = kAbs ? std::fabs(xb[m][i]) : xb[m][i];
      const V8f x8{a, a, a, a, b, b, b, b};
      V8f d;
      dq(m, x8, d);
      if constexpr (kFloat) {
        const V8f e = x8 - d;
        if (wa) {
          const float u = wa[m][i], v = wb[m][i];
          acc[m] += e * e * V8f{u, u, u, u, v, v, v, v};
        } else {
          acc[m] += e * e;
        }
      } else {
        const V4f dl = __builtin_shufflevector(d, d, 0, 1, 2, 3), dh = __builtin_shufflevector(d, d, 4, 5, 6, 7);
        const V4d el = static_cast<double>(a) - __builtin_convertvector(dl, V4d);
        const V4d eh = static_cast<double>(b) - __builtin_convertvector(dh, V4d);
        if (wa) {
          lo[m] += el * el * static_cast<double>(wa[m][i]);
          hi[m] += eh * eh * static_cast<double>(wb[m][i]);
        } else {
          lo[m] += el * el;
          hi[m] += eh * eh;
        }
      }
    }
  }
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < 4; ++k) {
      err[m][k] = kFloat ? acc[m][k] : lo[m][k];
      err[m][4 + k] = kFloat ? acc[m][4 + k] : hi[m][k];
    }
}

// The chosen lane of each lane group of each of the M vectors (G groups of
// 8 / G lanes per vector; sse8_multi's arguments): from the float sums where
// screened_lane can tell, else from the double sums. same(m, j, k): lanes j
// and k of vector m are the same candidate.
template <bool kAbs, int M, int G, class Dq, class Same>
inline void choose_lanes(const float* const* xa, const float* const* xb, const float* const* wa,
                         const float* const* wb, std::size_t n, Dq&& dq, Same&& same, int (*lane)[G]) {
  constexpr int L = 8 / G;
  bool undecided = !g_mse_screening.load(std::memory_order_relaxed);
  if (!undecided) {
    float f[M][8];
    sse8_multi<float, kAbs, M>(xa, xb, wa, wb, n, dq, f);
    for (int m = 0; m < M; ++m)
      for (int g = 0; g < G; ++g) {
        lane[m][g] = screened_lane(f[m], g * L, L, n, [&](int j, int k) { return same(m, j, k); });
        undecided |= lane[m][g] < 0;
      }
    if (!undecided) return;
  } else {
    for (int m = 0; m < M; ++m)
      for (int g = 0; g < G; ++g) lane[m][g] = -1;
  }
  double e[M][8];
  sse8_multi<double, kAbs, M>(xa, xb, wa, wb, n, dq, e);
  for (int m = 0; m < M; ++m)
    for (int g = 0; g < G; ++g)
      if (lane[m][g] < 0) lane[m][g] = best_lane(e[m], g * L, L);
}

// One vector of 8 candidates over the n elements of x (weights w, or null):
// the chosen lane (same(j, k): lanes j and k are the same candidate).
template <bool kAbs, class Dq, class Same>
inline int choose_lane(const float* x, const float* w, std::size_t n, Dq&& dq, Same&& same) {
  const float* xs[1] = {x};
  const float* ws[1] = {w};
  int lane[1][1];
  choose_lanes<kAbs, 1, 1>(xs, xs, w ? ws : nullptr, w ? ws : nullptr, n,
                           [&](int, const V8f& v, V8f& d) { dq(v, d); },
                           [&](int, int j, int k) { return same(j, k); }, lane);
  return lane[0][0];
}

// The scalar measure for what the lanes cannot do (F16 quotients): the same
// element-order double sum.
template <class DqOne>
double sse_scalar(const float* x, const float* w, std::size_t n, DqOne&& dq) {
  double s = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double e = static_cast<double>(x[i]) - static_cast<double>(dq(x[i]));
    s += w ? e * e * static_cast<double>(w[i]) : e * e;
  }
  return s;
}

inline float rne_small(float v) { return (v + 12582912.0f) - 12582912.0f; }  // |v| < 2^22

// The E4M3 magnitude of one value, as e4m3_mag8 (scalar).
inline float e4m3_mag1(float a) {
  V8f m;
  e4m3_mag8(SELQ_SPLAT(a), m);
  return m[0];
}

}  // namespace

void MseMxScales(bool fp4, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes, float* inv,
                 float* sc) {
  // Four blocks at once, two per vector, four lanes each: e (the rule's),
  // e − 1, e + 1, e.
  constexpr int M = 2;
  for (std::size_t b0 = 0; b0 < nblk; b0 += 2 * M) {
    int e[M][8];
    float iv[M][8], sv[M][8];
    V8f i8[M], s8[M];
    const float* xa[M];
    const float* xb[M];
    const float* wa[M];
    const float* wb[M];
    std::size_t blk[2 * M];
    for (int h = 0; h < 2 * M; ++h) {
      // Past the row's end, the last block again (its result is discarded).
      const std::size_t b = blk[h] = std::min(b0 + static_cast<std::size_t>(h), nblk - 1);
      (h % 2 ? xb : xa)[h / 2] = x + b * 32;
      (h % 2 ? wb : wa)[h / 2] = w ? w + b * 32 : nullptr;
      const int e0 = sbytes[b];
      const int cand[4] = {e0, e0 - 1, e0 + 1, e0};
      for (int k = 0; k < 4; ++k) {
        const int c = cand[k] < 0 || cand[k] > 254 ? e0 : cand[k];
        const int lane = 4 * (h % 2) + k;
        e[h / 2][lane] = c;
        iv[h / 2][lane] = pow2(127 - c);
        sv[h / 2][lane] = pow2(c - 127);
      }
    }
    for (int m = 0; m < M; ++m) load8(iv[m], i8[m]), load8(sv[m], s8[m]);
    int lane[M][2];
    const float* const* wpa = w ? wa : nullptr;
    const float* const* wpb = w ? wb : nullptr;
    const auto same = [&](int m, int j, int k) { return e[m][j] == e[m][k]; };
    if (fp4)
      choose_lanes<true, M, 2>(xa, xb, wpa, wpb, 32,
                               [&](int m, const V8f& a, V8f& d) { e2m1_mag8(a * i8[m], d), d *= s8[m]; }, same, lane);
    else
      choose_lanes<true, M, 2>(xa, xb, wpa, wpb, 32,
                               [&](int m, const V8f& a, V8f& d) { e4m3_mag8(a * i8[m], d), d *= s8[m]; }, same, lane);
    for (int h = 0; h < 2 * M && b0 + static_cast<std::size_t>(h) < nblk; ++h) {
      const int k = lane[h / 2][h % 2];
      sbytes[blk[h]] = static_cast<std::uint8_t>(e[h / 2][k]);
      inv[blk[h]] = iv[h / 2][k];
      sc[blk[h]] = sv[h / 2][k];
    }
  }
}

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
    int lane[M][1];
    const float* const* wp = p.weights ? ws : nullptr;
    choose_lanes<true, M, 1>(
        xs, xs, wp, wp, 16, [&](int m, const V8f& a, V8f& d) { e2m1_mag8(a / e8[m], d), d *= e8[m]; },
        [&](int m, int j, int k) { return e[m][j] == e[m][k]; }, lane);
    for (int m = 0; m < M && b0i + static_cast<std::size_t>(m) < nblk; ++m) {
      const int k = lane[m][0];
      sbytes[blk[m]] = static_cast<std::uint8_t>(codes[m][k]);
      eff[blk[m]] = e[m][k];
    }
  }
}

void MseIntScales(const IntRowParams& p, float qmin, float qmax, const float* x, std::int64_t in, const float* mn,
                  const float* mx, float* s, float* zp) {
  const std::int64_t ngroups = in / p.gw;
  const auto gw = static_cast<std::size_t>(p.gw);
  // The rule maps the range to (2^b − 1)/2 (7.5, 127.5), so the largest
  // positive element rounds past qmax and clips: r = that over qmax maps it
  // onto qmax instead. Then clips of 5% steps (int4) or 0.5% (int8).
  const float widen = (std::ldexp(1.0f, p.bits) - 1.0f) / 2.0f / qmax;
  const float step = p.bits <= 4 ? 0.05f : 0.005f;
  const bool asym = !p.sym;
  // Two groups at once, one vector of 8 candidates each: nearest, the
  // widened range, 6 clips.
  constexpr int M = 2;
  for (std::int64_t g0 = 0; g0 < ngroups; g0 += M) {
    float cs[M][8], cz[M][8];
    const float* xs[M];
    const float* ws[M];
    std::int64_t grp[M];
    for (int m = 0; m < M; ++m) {
      const std::int64_t g = grp[m] = std::min(g0 + m, ngroups - 1);  // past the end: the last group again
      xs[m] = x + g * p.gw;
      ws[m] = p.weights ? p.weights + g * p.gw : nullptr;
      cs[m][0] = s[g];
      cz[m][0] = zp[g];
      for (int k = 1; k < 8; ++k) {
        const float r = k == 1 ? widen : 1.0f - step * static_cast<float>(k - 1);
        int_group_qparams(p, qmin, qmax, mn[g] * r, mx[g] * r, cs[m][k], cz[m][k]);
      }
    }
    int lane[M][1];
    if (p.ct == DType::F16) {
      double err[M][8];
      for (int m = 0; m < M; ++m) {
        for (int k = 0; k < 8; ++k)
          err[m][k] = sse_scalar(xs[m], ws[m], gw, [&](float xi) {
            float v = round_to(DType::F16, xi / cs[m][k]);
            if (asym) v = round_to(DType::F16, v + cz[m][k]);
            const float q = rne_small(std::clamp(v, qmin - 1.0f, qmax + 1.0f));
            return (std::clamp(q, qmin, qmax) - cz[m][k]) * cs[m][k];
          });
        lane[m][0] = best_lane(err[m], 0, 8);
      }
    } else {
      const V8f lo1 = SELQ_SPLAT(qmin - 1.0f), hi1 = SELQ_SPLAT(qmax + 1.0f), lo = SELQ_SPLAT(qmin),
                hi = SELQ_SPLAT(qmax), magic = SELQ_SPLAT(12582912.0f);
      V8f s8[M], z8[M];
      for (int m = 0; m < M; ++m) load8(cs[m], s8[m]), load8(cz[m], z8[m]);
      const float* const* wp = p.weights ? ws : nullptr;
      const auto dq = [&](int m, const V8f& xv, V8f& d) {
        V8f v = xv / s8[m];
        in_dtype(p.ct, v);
        if (asym) {
          v += z8[m];
          in_dtype(p.ct, v);
        }
        v = v > lo1 ? v : lo1;  // clamp to [qmin - 1, qmax + 1], round, clamp to [qmin, qmax]
        v = v < hi1 ? v : hi1;
        V8f q = (v + magic) - magic;
        q = q > lo ? q : lo;
        q = q < hi ? q : hi;
        d = (q - z8[m]) * s8[m];
      };
      choose_lanes<false, M, 1>(xs, xs, wp, wp, gw, dq,
                                [&](int m, int j, int k) { return cs[m][j] == cs[m][k] && cz[m][j] == cz[m][k]; },
                                lane);
    }
    for (int m = 0; m < M && g0 + m < ngroups; ++m) {
      const int k = lane[m][0];
      s[grp[m]] = cs[m][k];
      zp[grp[m]] = cz[m][k];
    }
  }
}

float MseFp8Scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax, float nearest) {
  // Lanes: nearest, then the scales of r·amax for r = 0.975 ... 0.825.
  float cs[8];
  cs[0] = nearest;
  for (int k = 1; k < 8; ++k) cs[k] = fp8_scale_for_amax(p, amax * (1.0f - 0.025f * static_cast<float>(k)));
  if (p.ct == DType::F16) {
    double err[8];
    for (int k = 0; k < 8; ++k)
      err[k] = sse_scalar(x, w, n, [&](float xi) {
        return std::copysign(e4m3_mag1(std::fabs(round_to(DType::F16, xi / cs[k]))) * cs[k], xi);
      });
    return cs[best_lane(err, 0, 8)];
  }
  V8f s8;
  load8(cs, s8);
  const auto dq = [&](const V8f& a, V8f& d) {
    V8f v = a / s8;
    in_dtype(p.ct, v);
    e4m3_mag8(v, d);
    d *= s8;
  };
  return cs[choose_lane<true>(x, w, n, dq, [&](int j, int k) { return cs[j] == cs[k]; })];
}

std::uint8_t MseE4m3E8m0Byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest) {
  const int e0 = nearest;
  int e[8] = {e0, e0 - 1, e0 + 1, e0, e0, e0, e0, e0};
  float sv[8];
  for (int k = 0; k < 8; ++k) {
    if (e[k] < 0 || e[k] > 254) e[k] = e0;
    sv[k] = pow2(e[k] - 127);
  }
  V8f s8;
  load8(sv, s8);
  const int k = choose_lane<true>(x, w, n, [&](const V8f& a, V8f& d) { e4m3_mag8(a / s8, d), d *= s8; },
                                 [&](int j, int i) { return e[j] == e[i]; });
  return static_cast<std::uint8_t>(e[k]);
}

void MagnitudeWeights(const float* x, std::size_t n, std::size_t block, float* out) {
  for (std::size_t b = 0; b < n; b += block) {
    const std::size_t len = std::min(n, b + block) - b;
    const float* xb = x + b;
    // Eight interleaved sums (element i into sum i mod 8), added pairwise:
    // a fixed order the compiler can keep in vector lanes.
    double acc[8] = {};
    std::size_t i = 0;
    for (; i + 8 <= len; i += 8)
      for (std::size_t k = 0; k < 8; ++k) acc[k] += static_cast<double>(xb[i + k]) * static_cast<double>(xb[i + k]);
    for (; i < len; ++i) acc[i % 8] += static_cast<double>(xb[i]) * static_cast<double>(xb[i]);
    const double sum_sq = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    const double inv_mean = sum_sq > 0.0 ? static_cast<double>(len) / sum_sq : 0.0;
    for (std::size_t j = 0; j < len; ++j) {
      const double xj = xb[j];
      out[b + j] = static_cast<float>(2.0 + xj * xj * inv_mean);
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace selq::quant::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq::quant::detail {

std::atomic<bool> g_mse_screening{true};
bool set_mse_screening(bool on) { return g_mse_screening.exchange(on); }

HWY_EXPORT(MseMxScales);
HWY_EXPORT(MseNvfp4Scales);
HWY_EXPORT(MseIntScales);
HWY_EXPORT(MseFp8Scale);
HWY_EXPORT(MseE4m3E8m0Byte);
HWY_EXPORT(MagnitudeWeights);

bool mse_weighs_magnitude(const SchemeSpec& spec) {
  const bool is_int = spec.kind == SchemeKind::IntGroup || spec.kind == SchemeKind::IntChannel;
  return spec.kind == SchemeKind::MXFP4 || (is_int && spec.bits <= 4);
}

void magnitude_weights(const float* x, std::size_t n, std::size_t block, float* out) {
  HWY_DYNAMIC_DISPATCH(MagnitudeWeights)(x, n, block, out);
}

namespace {
// `mse`'s weights for a row (null w) where the scheme takes them; else w.
const float* mse_weights(bool by_magnitude, const float* x, const float* w, std::size_t n, std::size_t block) {
  if (w || !by_magnitude) return w;
  thread_local std::vector<float> row;
  row.resize(n);
  magnitude_weights(x, n, block, row.data());
  return row.data();
}
}  // namespace

void mse_mx_scales(bool fp4, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes, float* inv,
                   float* sc) {
  w = mse_weights(fp4, x, w, nblk * 32, 32);
  HWY_DYNAMIC_DISPATCH(MseMxScales)(fp4, x, w, nblk, sbytes, inv, sc);
}
void mse_nvfp4_scales(const Nvfp4RowParams& p, const float* x, const float* block_amax, std::size_t nblk,
                      std::uint8_t* sbytes, float* eff) {
  HWY_DYNAMIC_DISPATCH(MseNvfp4Scales)(p, x, block_amax, nblk, sbytes, eff);
}
void mse_int_scales(const IntRowParams& p, float qmin, float qmax, const float* x, std::int64_t in, const float* mn,
                    const float* mx, float* s, float* zp) {
  IntRowParams q = p;
  q.weights = mse_weights(p.bits <= 4, x, p.weights,
                          static_cast<std::size_t>(in), static_cast<std::size_t>(p.gw));
  HWY_DYNAMIC_DISPATCH(MseIntScales)(q, qmin, qmax, x, in, mn, mx, s, zp);
}
float mse_fp8_scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax, float nearest) {
  return HWY_DYNAMIC_DISPATCH(MseFp8Scale)(p, x, w, n, amax, nearest);
}
std::uint8_t mse_e4m3_e8m0_byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest) {
  return HWY_DYNAMIC_DISPATCH(MseE4m3E8m0Byte)(x, w, n, nearest);
}

}  // namespace selq::quant::detail
#endif  // HWY_ONCE
