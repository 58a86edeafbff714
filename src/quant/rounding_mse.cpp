// Roundings `mse` and `weighted` (quant/rounding_mse.h): per block, the
// candidate scale with the least (weighted) squared error, nearest's kept on ties.
//
// Each candidate's error is computed the way the row kernels encode (the
// same quotient, the same rounding onto the element grid, the same F32
// product for the dequantized value), so the error the search compares is
// the error the stored block has. The candidates of a block are evaluated
// side by side, one per lane of an 8-lane vector (GCC vector extensions:
// elementwise IEEE operations, the same results in SSE2 or AVX2 code), one
// element at a time; each lane sums its squares (x − dq)², exact differences
// in double, in element order: the plain loop's sum, bit for bit, on every
// machine. Lane 0 is nearest's choice and the first lane with the least sum
// wins, so ties keep nearest.
#include "quant/rounding_mse.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "quant/detail.h"

// AVX2 copies of the searches where the CPU has it (no FMA: contracting
// a square into its sum would change the sum, so the choice, and the bytes,
// are the same on every machine).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define SELQ_MSE_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define SELQ_MSE_CLONES
#endif

namespace selq::quant::detail {

namespace {

typedef float V8f __attribute__((vector_size(32)));
typedef std::int32_t V8i __attribute__((vector_size(32)));
typedef std::uint32_t V8u __attribute__((vector_size(32)));
typedef float V4f __attribute__((vector_size(16)));
typedef double V4d __attribute__((vector_size(32)));

// No function takes or returns a 32-byte vector by value (that would change
// the ABI between the AVX2 and the default copies): results go to out.
#define SELQ_SPLAT(v) (V8f{(v), (v), (v), (v), (v), (v), (v), (v)})
#define SELQ_SPLAT_U(v) (V8u{(v), (v), (v), (v), (v), (v), (v), (v)})

inline void load8(const float* p, V8f& v) { std::memcpy(&v, p, sizeof v); }

// The E2M1 magnitude a (>= 0) rounds to: RNE at the midpoints, as
// e2m1_code, saturating at 6 (a comparison is −1 where true).
inline void e2m1_mag8(const V8f& a, V8f& out) {
  const V8i c1 = (a > SELQ_SPLAT(0.25f)) + (a >= SELQ_SPLAT(0.75f)) + (a > SELQ_SPLAT(1.25f)) + (a >= SELQ_SPLAT(1.75f));
  const V8i c2 = (a > SELQ_SPLAT(2.5f)) + (a >= SELQ_SPLAT(3.5f));
  const V8i c3 = a > SELQ_SPLAT(5.0f);
  out = -(SELQ_SPLAT(0.5f) * __builtin_convertvector(c1, V8f) + __builtin_convertvector(c2, V8f) +
          SELQ_SPLAT(2.0f) * __builtin_convertvector(c3, V8f));
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

// The value of a positive E4M3 code (1..0x7E), as e4m3_value.
inline float e4m3_code_value(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? static_cast<float>(m) * 0x1p-9f
                : std::bit_cast<float>(static_cast<std::uint32_t>((e + 120) << 23 | m << 20));
}

// err[m][k] = Σ_i w_i (x_i − dq_mk(x_i))² over n elements for M vectors m
// of 8 lanes k: lanes 0-3 over xa[m] (weights wa[m]), lanes 4-7 over xb[m]
// (wb[m]) (one block's 8 candidates, or two blocks' 4); w_i = 1 when wa is
// null (`mse`), else the input channel's weight (`weighted`). With kAbs, x_i
// is |x_i| and dq its magnitude (the kernels' grids are symmetric). dq(m, v,
// d) gets x_i in every lane of its half and sets d. Each lane adds in element
// order; the M vectors are independent chains of adds, which the core overlaps.
template <bool kAbs, int M, class Dq>
inline void sse8_multi(const float* const* xa, const float* const* xb, const float* const* wa,
                       const float* const* wb, std::size_t n, Dq&& dq, double (*err)[8]) {
  V4d lo[M], hi[M];
  for (int m = 0; m < M; ++m) lo[m] = hi[m] = V4d{0.0, 0.0, 0.0, 0.0};
  for (std::size_t i = 0; i < n; ++i) {
    for (int m = 0; m < M; ++m) {
      const float a = kAbs ? std::fabs(xa[m][i]) : xa[m][i], b = kAbs ? std::fabs(xb[m][i]) : xb[m][i];
      V8f d;
      dq(m, V8f{a, a, a, a, b, b, b, b}, d);
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
  for (int m = 0; m < M; ++m)
    for (int k = 0; k < 4; ++k) err[m][k] = lo[m][k], err[m][4 + k] = hi[m][k];
}

// One vector of 8 candidates over the n elements of x (weights w, or null).
template <bool kAbs, class Dq>
inline void sse8(const float* x, const float* w, std::size_t n, Dq&& dq, double* err) {
  const float* xs[1] = {x};
  const float* ws[1] = {w};
  double e[1][8];
  sse8_multi<kAbs, 1>(xs, xs, w ? ws : nullptr, w ? ws : nullptr, n,
                      [&](int, const V8f& v, V8f& d) { dq(v, d); }, e);
  std::memcpy(err, e[0], sizeof e[0]);
}

// The first of lanes [first, first + n) with the least error.
inline int best_lane(const double* err, int first, int n) {
  int k = first;
  for (int j = first + 1; j < first + n; ++j)
    if (err[j] < err[k]) k = j;
  return k;
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

SELQ_MSE_CLONES void mse_mx_scales(bool fp4, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes,
                                   float* inv, float* sc) {
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
    double err[M][8];
    const float* const* wpa = w ? wa : nullptr;
    const float* const* wpb = w ? wb : nullptr;
    if (fp4)
      sse8_multi<true, M>(xa, xb, wpa, wpb, 32, [&](int m, const V8f& a, V8f& d) { e2m1_mag8(a * i8[m], d), d *= s8[m]; }, err);
    else
      sse8_multi<true, M>(xa, xb, wpa, wpb, 32, [&](int m, const V8f& a, V8f& d) { e4m3_mag8(a * i8[m], d), d *= s8[m]; }, err);
    for (int h = 0; h < 2 * M && b0 + static_cast<std::size_t>(h) < nblk; ++h) {
      const int k = best_lane(err[h / 2], 4 * (h % 2), 4);
      sbytes[blk[h]] = static_cast<std::uint8_t>(e[h / 2][k]);
      inv[blk[h]] = iv[h / 2][k];
      sc[blk[h]] = sv[h / 2][k];
    }
  }
}

SELQ_MSE_CLONES void mse_nvfp4_scales(const Nvfp4RowParams& p, const float* x, const float* block_amax,
                                      std::size_t nblk, std::uint8_t* sbytes, float* eff) {
  constexpr int M = 4;  // blocks searched together
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
      // Codes 0x01..0x7E are the positive E4M3 values in increasing order:
      // nearest's byte b0 and its neighbours, and the neighbours of b46, the
      // byte that maps the block maximum to 4 (Four Over Six).
      const int b0 = sbytes[b];
      const int b46 = nvfp4_block_scale_byte(p, block_amax[b], 4.0f);
      const int c8[8] = {b0, b0 - 1, b0 + 1, b0 + 2, b0 - 2, b46 - 1, b46, b46 + 1};
      e[m][0] = eff[b];
      codes[m][0] = b0;
      for (int k = 1; k < 8; ++k) {
        const int c = c8[k];
        const float v = c >= 1 && c <= 0x7E ? e4m3_code_value(c) : 0.0f;
        const float ev = p.ct ? v / p.global : v * p.global;
        const bool ok = ev > 0.0f && std::isfinite(ev);
        codes[m][k] = ok ? c : b0;
        e[m][k] = ok ? ev : eff[b];
      }
      load8(e[m], e8[m]);
    }
    double err[M][8];
    const float* const* wp = p.weights ? ws : nullptr;
    sse8_multi<true, M>(xs, xs, wp, wp, 16, [&](int m, const V8f& a, V8f& d) { e2m1_mag8(a / e8[m], d), d *= e8[m]; },
                        err);
    for (int m = 0; m < M && b0i + static_cast<std::size_t>(m) < nblk; ++m) {
      const int k = best_lane(err[m], 0, 8);
      sbytes[blk[m]] = static_cast<std::uint8_t>(codes[m][k]);
      eff[blk[m]] = e[m][k];
    }
  }
}

SELQ_MSE_CLONES void mse_int_scales(const IntRowParams& p, float qmin, float qmax, const float* x, std::int64_t in,
                                    const float* mn, const float* mx, float* s, float* zp) {
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
    double err[M][8];
    if (p.ct == DType::F16) {
      for (int m = 0; m < M; ++m)
        for (int k = 0; k < 8; ++k)
          err[m][k] = sse_scalar(xs[m], ws[m], gw, [&](float xi) {
            float v = round_to(DType::F16, xi / cs[m][k]);
            if (asym) v = round_to(DType::F16, v + cz[m][k]);
            const float q = rne_small(std::clamp(v, qmin - 1.0f, qmax + 1.0f));
            return (std::clamp(q, qmin, qmax) - cz[m][k]) * cs[m][k];
          });
    } else {
      const V8f lo1 = SELQ_SPLAT(qmin - 1.0f), hi1 = SELQ_SPLAT(qmax + 1.0f), lo = SELQ_SPLAT(qmin),
                hi = SELQ_SPLAT(qmax), magic = SELQ_SPLAT(12582912.0f);
      V8f s8[M], z8[M];
      for (int m = 0; m < M; ++m) load8(cs[m], s8[m]), load8(cz[m], z8[m]);
      const float* const* wp = p.weights ? ws : nullptr;
      sse8_multi<false, M>(xs, xs, wp, wp, gw, [&](int m, const V8f& xv, V8f& d) {
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
      }, err);
    }
    for (int m = 0; m < M && g0 + m < ngroups; ++m) {
      const int k = best_lane(err[m], 0, 8);
      s[grp[m]] = cs[m][k];
      zp[grp[m]] = cz[m][k];
    }
  }
}

SELQ_MSE_CLONES float mse_fp8_scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax,
                                    float nearest) {
  // Lanes: nearest, then the scales of r·amax for r = 0.975 ... 0.825.
  float cs[8];
  cs[0] = nearest;
  for (int k = 1; k < 8; ++k) cs[k] = fp8_scale_for_amax(p, amax * (1.0f - 0.025f * static_cast<float>(k)));
  double err[8];
  if (p.ct == DType::F16) {
    for (int k = 0; k < 8; ++k)
      err[k] = sse_scalar(x, w, n, [&](float xi) {
        return std::copysign(e4m3_mag1(std::fabs(round_to(DType::F16, xi / cs[k]))) * cs[k], xi);
      });
  } else {
    V8f s8;
    load8(cs, s8);
    sse8<true>(x, w, n, [&](const V8f& a, V8f& d) {
      V8f v = a / s8;
      in_dtype(p.ct, v);
      e4m3_mag8(v, d);
      d *= s8;
    }, err);
  }
  return cs[best_lane(err, 0, 8)];
}

SELQ_MSE_CLONES std::uint8_t mse_e4m3_e8m0_byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest) {
  const int e0 = nearest;
  int e[8] = {e0, e0 - 1, e0 + 1, e0, e0, e0, e0, e0};
  float sv[8];
  for (int k = 0; k < 8; ++k) {
    if (e[k] < 0 || e[k] > 254) e[k] = e0;
    sv[k] = pow2(e[k] - 127);
  }
  V8f s8;
  load8(sv, s8);
  double err[8];
  sse8<true>(x, w, n, [&](const V8f& a, V8f& d) { e4m3_mag8(a / s8, d), d *= s8; }, err);
  return static_cast<std::uint8_t>(e[best_lane(err, 0, 8)]);
}

}  // namespace selq::quant::detail
