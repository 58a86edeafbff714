// Roundings `mse` and `weighted` (quant/rounding_mse.h): per block, the
// candidate scale with the least (weighted) squared error, nearest's kept on ties.
//
// Each candidate's error is computed the way the row kernels encode (the
// same quotient, the same rounding onto the element grid, the same F32
// product for the dequantized value), so the error the search compares is
// the error the stored block has. The choice is defined by each candidate's
// sum of w (x − dq)², exact differences in double, in element order: the
// plain loop's sum, bit for bit, on every machine (DoubleSums); candidate 0
// is nearest's choice and the first candidate with the least sum wins, so
// ties keep nearest.
//
// The sums are first taken in float, in vector lanes over the block's
// elements, every candidate against the same loaded elements (FloatSums;
// docs/BENCHMARKS.md has what it buys). A float sum is within a known bound
// of the double one (screened_lane); where the least float sum beats every
// other candidate by more than both bounds, the double sums would choose the
// same candidate. Only the rare blocks whose best two are that close (or
// zero, or out of float range) are summed again in double.
#include "quant/rounding_mse.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/detail.h"
#include "quant/rounding_screen.h"

// Highway compiles this file once per SIMD target (foreach_target.h
// re-includes it) and HWY_DYNAMIC_DISPATCH picks the best at run time, so
// the searches, their helpers and lambdas all run at the CPU's width. The
// file is built with -ffp-contract=off: a product contracted into a sum
// would change the double sums, so the choice, and the bytes, would differ
// between machines.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/rounding_mse.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "quant/grid_simd-inl.h"

#ifndef SELQ_ROUNDING_MSE_SHARED
#define SELQ_ROUNDING_MSE_SHARED
namespace selq::quant::detail {

// How a search weighs each element's squared error (rounding_mse.h).
enum class Weighing {
  kNone,       // `mse` on NVFP4 and the 8-bit grids
  kChannel,    // `weighted`: the input channels' weights
  kMagnitude,  // `mse` on 4-bit INT and MXFP4: 2 + x²/mean(x²) of the block
};
}  // namespace selq::quant::detail
#endif

HWY_BEFORE_NAMESPACE();
namespace selq::quant::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void MagnitudeWeights(const float* x, std::size_t n, std::size_t block, float* out);

namespace {

// The grid values of the lanes, as the row kernels round them (the codes
// are not needed here).
HWY_INLINE VF E2m1Value(VF v) {
  VF val;
  (void)E2m1(v, val);
  return val;
}
HWY_INLINE VF E4m3Value(VF v) {
  VF val;
  (void)E4m3(v, val);
  return val;
}

// The quotient as the kernels form it in dtype ct (F32 or BF16; F16 has
// no vector path here).
HWY_INLINE VF InDtype(DType ct, VF v) { return ct == DType::BF16 ? RoundBf16(v) : v; }

// ------------------------------------------------------------------ the sums

// Σ x² over n elements in double (the magnitude weights' scale in the screen).
HWY_INLINE double SumSquares(const float* x, std::size_t n) {
  double s = 0.0;
  std::size_t i = 0;
#if HWY_TARGET != HWY_SCALAR  // one lane: no halves to promote
  const DF d;
  const hn::Half<DF> dh;
  const hn::Repartition<double, DF> dd;
  const std::size_t N = hn::Lanes(d);
  auto acc = hn::Zero(dd);
  for (; i + N <= n; i += N) {
    const VF v = hn::LoadU(d, x + i);
    const auto lo = hn::PromoteTo(dd, hn::LowerHalf(dh, v)), hi = hn::PromoteTo(dd, hn::UpperHalf(dh, v));
    acc = hn::Add(acc, hn::Add(hn::Mul(lo, lo), hn::Mul(hi, hi)));
  }
  s = hn::GetLane(hn::SumOfLanes(dd, acc));
#endif
  for (; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

// f[j] = Σ_i w_i (x_i − dq(j, x_i))² over the n elements of x in float, for
// the K candidates j, the elements in vector lanes (in any order: the
// screen's bound holds for every order). With kAbs x_i is |x_i| and dq(j, a)
// its magnitude (the grid is symmetric). w: the elements' channel weights
// (kChannel). kMagnitude forms 2 + x²·k in float, k = n / Σx² (within 5 float
// ulps of the weights the double sums take); false where k is out of
// 2^-100 ... 2^100, where x² could lose that (the double sums decide).
template <int K, bool kAbs, Weighing kW, class Dq>
HWY_INLINE bool FloatSums(const float* x, const float* w, std::size_t n, const Dq& dq, float* f) {
  const DF d;
  const std::size_t N = hn::Lanes(d);
  VF k2 = hn::Zero(d);
  if constexpr (kW == Weighing::kMagnitude) {
    const float k = static_cast<float>(static_cast<double>(n) / SumSquares(x, n));
    if (!(k >= 0x1p-100f && k <= 0x1p100f)) return false;
    k2 = hn::Set(d, k);
  }
  VF acc[K];
  for (int j = 0; j < K; ++j) acc[j] = hn::Zero(d);
  const auto add = [&](VF xv, VF wv) HWY_ATTR {
    if constexpr (kAbs) xv = hn::Abs(xv);
    if constexpr (kW == Weighing::kMagnitude) wv = hn::Add(hn::Mul(hn::Mul(xv, xv), k2), hn::Set(d, 2.0f));
    for (int j = 0; j < K; ++j) {
      const VF e = hn::Sub(xv, dq(j, xv));
      const VF e2 = hn::Mul(e, e);
      acc[j] = hn::Add(acc[j], kW == Weighing::kNone ? e2 : hn::Mul(e2, wv));
    }
  };
  std::size_t i = 0;
  for (; i + N <= n; i += N) add(hn::LoadU(d, x + i), kW == Weighing::kChannel ? hn::LoadU(d, w + i) : k2);
  if (i < n) {
    // The tail through zero-padded copies: every grid holds 0 exactly (INT's
    // zero point is an integer in its range), so the padding adds no error.
    alignas(64) float xt[kMaxLanes] = {}, wt[kMaxLanes] = {};
    std::memcpy(xt, x + i, (n - i) * sizeof(float));
    if (kW == Weighing::kChannel) std::memcpy(wt, w + i, (n - i) * sizeof(float));
    add(hn::Load(d, xt), hn::Load(d, wt));
  }
  for (int j = 0; j < K; ++j) f[j] = hn::GetLane(hn::SumOfLanes(d, acc[j]));
  return true;
}

// e[j] = Σ_i w_i (x_i − dq(j, x_i))², each difference exact in double, added
// in element order: the measure that defines the choice. w: null for 1.
template <int K, bool kAbs, class Dq>
HWY_NOINLINE void DoubleSums(const float* x, const float* w, std::size_t n, const Dq& dq, double* e) {
  const DF d;
  const std::size_t N = hn::Lanes(d);
  alignas(64) float xt[kMaxLanes], dqt[K][kMaxLanes];
  for (int j = 0; j < K; ++j) e[j] = 0.0;
  for (std::size_t i = 0; i < n; i += N) {
    const std::size_t len = std::min(N, n - i);
    std::memset(xt, 0, sizeof xt);
    std::memcpy(xt, x + i, len * sizeof(float));
    VF xv = hn::Load(d, xt);
    if constexpr (kAbs) xv = hn::Abs(xv);
    hn::Store(xv, d, xt);
    for (int j = 0; j < K; ++j) hn::Store(dq(j, xv), d, dqt[j]);
    for (std::size_t l = 0; l < len; ++l)
      for (int j = 0; j < K; ++j) {
        const double diff = static_cast<double>(xt[l]) - static_cast<double>(dqt[j][l]);
        e[j] += w ? diff * diff * static_cast<double>(w[i + l]) : diff * diff;
      }
  }
}

// The candidate chosen for one block of n elements x (weights w: the
// block's channel weights, or null), from the float sums where screened_lane
// can tell, else from the double sums. w_max bounds the weights (the
// screen's allowance for underflow); same(j, k): j and k are one candidate.
template <int K, bool kAbs, Weighing kW, class Dq, class Same>
HWY_INLINE int Choose(const float* x, const float* w, std::size_t n, float w_max, const Dq& dq, const Same& same) {
  if (g_mse_screening.load(std::memory_order_relaxed)) {
    float f[K];
    if (FloatSums<K, kAbs, kW>(x, w, n, dq, f)) {
      const int k = screened_lane(f, 0, K, n, w_max, same);
      if (k >= 0) return k;
    }
  }
  if constexpr (kW == Weighing::kMagnitude) {
    thread_local std::vector<float> mw;
    mw.resize(n);
    MagnitudeWeights(x, n, n, mw.data());
    w = mw.data();
  }
  double e[K];
  DoubleSums<K, kAbs>(x, w, n, dq, e);
  return best_lane(e, 0, K);
}

// Choose with the weighing known at run time.
template <int K, bool kAbs, class Dq, class Same>
HWY_INLINE int ChooseWeighed(Weighing wg, const float* x, const float* w, std::size_t n, float w_max, const Dq& dq,
                             const Same& same) {
  switch (wg) {
    case Weighing::kChannel: return Choose<K, kAbs, Weighing::kChannel>(x, w, n, w_max, dq, same);
    case Weighing::kMagnitude: return Choose<K, kAbs, Weighing::kMagnitude>(x, nullptr, n, w_max, dq, same);
    case Weighing::kNone: break;
  }
  return Choose<K, kAbs, Weighing::kNone>(x, nullptr, n, w_max, dq, same);
}

// A bound on every weight of a search over n elements in blocks of `block`:
// the screen's allowance for products that underflow.
float WeightBound(Weighing wg, const float* w, std::size_t n, std::size_t block) {
  if (wg == Weighing::kMagnitude) return 2.0f + static_cast<float>(block);  // x²/mean(x²) <= block
  return wg == Weighing::kNone ? 1.0f : largest_weight(w, n);
}

// INT candidate j's dequantized value of x, as the kernels form it: the
// quotient in their dtype (BF16 or F32), plus the zero point where
// asymmetric, rounded and clamped to [qmin, qmax]. (The kernels also clamp
// to [qmin − 1, qmax + 1] before rounding, which only keeps the magic number
// in its range: a quotient past that still rounds past qmin or qmax, so the
// clamp after gives the same code.) A type of its own, not a lambda, so that
// the dtype and the symmetry are fixed outside the search's loops.
template <bool kAsym, bool kBf16>
struct IntDq {
  const float* s;  // the candidates' scales
  const float* z;  // and zero points
  float qmin, qmax;
  HWY_INLINE VF operator()(int j, VF xv) const {
    const DF d;
    VF v = hn::Div(xv, hn::Set(d, s[j]));
    if constexpr (kBf16) v = RoundBf16(v);
    if constexpr (kAsym) {
      v = hn::Add(v, hn::Set(d, z[j]));
      if constexpr (kBf16) v = RoundBf16(v);
    }
    const VF magic = hn::Set(d, 12582912.0f);
    const VF q = hn::Min(hn::Max(hn::Sub(hn::Add(v, magic), magic), hn::Set(d, qmin)), hn::Set(d, qmax));
    return hn::Mul(kAsym ? hn::Sub(q, hn::Set(d, z[j])) : q, hn::Set(d, s[j]));
  }
};

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

// The E4M3 value of one value, as E4m3Value (scalar).
inline float e4m3_mag1(float a) { return hn::GetLane(E4m3Value(hn::Set(DF(), a))); }

}  // namespace

void MseMxScales(bool fp4, Weighing wg, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes,
                 float* inv, float* sc) {
  const float w_max = WeightBound(wg, w, nblk * 32, 32);
  const DF d;
  for (std::size_t b = 0; b < nblk; ++b) {
    // The rule's exponent e, e − 1, e + 1 (e where those leave E8M0's range).
    // Without data (`mse`'s magnitude weighing) e − 1 is left out: it clips the
    // block's largest elements, which lowered the weights' error but raised the
    // model's KL on every held-out domain (docs/QUALITY.md); weighed by the
    // inputs (`weighted`, GPTQ's scales) the same choice lowers it.
    const int e0 = sbytes[b];
    int e[3] = {e0, wg == Weighing::kMagnitude ? e0 : e0 - 1, e0 + 1};
    float iv[3], sv[3];
    for (int k = 0; k < 3; ++k) {
      if (e[k] < 0 || e[k] > 254) e[k] = e0;
      iv[k] = pow2(127 - e[k]);
      sv[k] = pow2(e[k] - 127);
    }
    const auto same = [&](int j, int k) { return e[j] == e[k]; };
    const float* wb = w ? w + b * 32 : nullptr;
    const int k =
        fp4 ? ChooseWeighed<3, true>(
                  wg, x + b * 32, wb, 32, w_max,
                  [&](int j, VF a) HWY_ATTR { return hn::Mul(E2m1Value(hn::Mul(a, hn::Set(d, iv[j]))), hn::Set(d, sv[j])); },
                  same)
            : ChooseWeighed<3, true>(
                  wg, x + b * 32, wb, 32, w_max,
                  [&](int j, VF a) HWY_ATTR { return hn::Mul(E4m3Value(hn::Mul(a, hn::Set(d, iv[j]))), hn::Set(d, sv[j])); },
                  same);
    sbytes[b] = static_cast<std::uint8_t>(e[k]);
    inv[b] = iv[k];
    sc[b] = sv[k];
  }
}

void MseIntScales(const IntRowParams& p, Weighing wg, float qmin, float qmax, const float* x, std::int64_t in,
                  const float* mn, const float* mx, float* s, float* zp) {
  const std::int64_t ngroups = in / p.gw;
  const auto gw = static_cast<std::size_t>(p.gw);
  const float w_max = WeightBound(wg, p.weights, static_cast<std::size_t>(in), gw);
  // The rule maps the range to (2^b − 1)/2 (7.5, 127.5), so the largest
  // positive element rounds past qmax and clips: r = that over qmax maps it
  // onto qmax instead. Then clips of 5% steps (int4) or 0.5% (int8).
  const float widen = (std::ldexp(1.0f, p.bits) - 1.0f) / 2.0f / qmax;
  const float step = p.bits <= 4 ? 0.05f : 0.005f;
  const bool asym = !p.sym;
  for (std::int64_t g = 0; g < ngroups; ++g) {
    // Candidates: nearest, the widened range, 6 clips.
    float cs[8], cz[8];
    cs[0] = s[g];
    cz[0] = zp[g];
    for (int k = 1; k < 8; ++k) {
      const float r = k == 1 ? widen : 1.0f - step * static_cast<float>(k - 1);
      int_group_qparams(p, qmin, qmax, mn[g] * r, mx[g] * r, cs[k], cz[k]);
    }
    const float* xg = x + g * p.gw;
    const float* wgp = p.weights ? p.weights + g * p.gw : nullptr;
    int k = 0;
    if (p.ct == DType::F16) {
      const float* ws = wg == Weighing::kNone ? nullptr : wgp;
      thread_local std::vector<float> mw;
      if (wg == Weighing::kMagnitude) {
        mw.resize(gw);
        MagnitudeWeights(xg, gw, gw, mw.data());
        ws = mw.data();
      }
      double err[8];
      for (int j = 0; j < 8; ++j)
        err[j] = sse_scalar(xg, ws, gw, [&](float xi) {
          float v = round_to(DType::F16, xi / cs[j]);
          if (asym) v = round_to(DType::F16, v + cz[j]);
          const float q = rne_small(std::clamp(v, qmin - 1.0f, qmax + 1.0f));
          return (std::clamp(q, qmin, qmax) - cz[j]) * cs[j];
        });
      k = best_lane(err, 0, 8);
    } else {
      const auto same = [&](int j, int i) { return cs[j] == cs[i] && cz[j] == cz[i]; };
      const auto choose = [&](auto dq) HWY_ATTR { return ChooseWeighed<8, false>(wg, xg, wgp, gw, w_max, dq, same); };
      const bool bf16 = p.ct == DType::BF16;
      if (asym)
        k = bf16 ? choose(IntDq<true, true>{cs, cz, qmin, qmax}) : choose(IntDq<true, false>{cs, cz, qmin, qmax});
      else
        k = bf16 ? choose(IntDq<false, true>{cs, cz, qmin, qmax}) : choose(IntDq<false, false>{cs, cz, qmin, qmax});
    }
    s[g] = cs[k];
    zp[g] = cz[k];
  }
}

float MseFp8Scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax, float nearest) {
  // Candidates: nearest, then the scales of r·amax for r = 0.975 ... 0.825.
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
  const Weighing wg = w ? Weighing::kChannel : Weighing::kNone;
  const DF d;
  const DType ct = p.ct;
  const auto dq = [&](int j, VF a) HWY_ATTR {
    const VF s = hn::Set(d, cs[j]);
    return hn::Mul(E4m3Value(InDtype(ct, hn::Div(a, s))), s);
  };
  return cs[ChooseWeighed<8, true>(wg, x, w, n, WeightBound(wg, w, n, n), dq,
                                   [&](int j, int k) { return cs[j] == cs[k]; })];
}

std::uint8_t MseE4m3E8m0Byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest) {
  const int e0 = nearest;
  int e[3] = {e0, e0 - 1, e0 + 1};
  float sv[3];
  for (int k = 0; k < 3; ++k) {
    if (e[k] < 0 || e[k] > 254) e[k] = e0;
    sv[k] = pow2(e[k] - 127);
  }
  const Weighing wg = w ? Weighing::kChannel : Weighing::kNone;
  const DF d;
  const int k = ChooseWeighed<3, true>(
      wg, x, w, n, WeightBound(wg, w, n, n),
      [&](int j, VF a) HWY_ATTR {
        const VF s = hn::Set(d, sv[j]);
        return hn::Mul(E4m3Value(hn::Div(a, s)), s);
      },
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
    // The tail continues the same lanes (i is a multiple of 8 here, so element i + k goes
    // to sum k); indexed by k rather than i % 8, which GCC 12 misreads as out of bounds.
    for (std::size_t k = 0; i + k < len; ++k)
      acc[k] += static_cast<double>(xb[i + k]) * static_cast<double>(xb[i + k]);
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
// How `mse` (w null) or `weighted` weighs a search's elements.
Weighing weighing(bool by_magnitude, const float* w) {
  return w ? Weighing::kChannel : by_magnitude ? Weighing::kMagnitude : Weighing::kNone;
}
}  // namespace

void mse_mx_scales(bool fp4, const float* x, const float* w, std::size_t nblk, std::uint8_t* sbytes, float* inv,
                   float* sc) {
  HWY_DYNAMIC_DISPATCH(MseMxScales)(fp4, weighing(fp4, w), x, w, nblk, sbytes, inv, sc);
}
void mse_int_scales(const IntRowParams& p, float qmin, float qmax, const float* x, std::int64_t in, const float* mn,
                    const float* mx, float* s, float* zp) {
  HWY_DYNAMIC_DISPATCH(MseIntScales)(p, weighing(p.bits <= 4, p.weights), qmin, qmax, x, in, mn, mx, s, zp);
}
float mse_fp8_scale(const Fp8Params& p, const float* x, const float* w, std::size_t n, float amax, float nearest) {
  return HWY_DYNAMIC_DISPATCH(MseFp8Scale)(p, x, w, n, amax, nearest);
}
std::uint8_t mse_e4m3_e8m0_byte(const float* x, const float* w, std::size_t n, std::uint8_t nearest) {
  return HWY_DYNAMIC_DISPATCH(MseE4m3E8m0Byte)(x, w, n, nearest);
}

}  // namespace selq::quant::detail
#endif  // HWY_ONCE
