// Highway compiles this file once per target (foreach_target.h re-includes
// it); HWY_DYNAMIC_DISPATCH picks the best target at run time.
//
// Rounding to E2M1/E4M3 produces the code and the decoded value together:
// the value is the f32 magnitude rounded onto the format's grid (RNE on the
// bit pattern in the normal range, a magic-number add in the subnormal
// range), and the code is read off its exponent and mantissa bits. This
// replaces encode + decode + scale + a separate metrics pass with one pass.
#include <algorithm>
#include <cstring>

#include "quant/detail_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "quant/kernels_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include "quant/grid_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace selq::quant::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D8 = hn::Rebind<std::uint8_t, DI>;

// Elements summed in float lanes before the partial sums move to double.
constexpr std::size_t kFlushEvery = 512;

#if HWY_TARGET != HWY_SCALAR
// Packs one vector of E2M1 codes (one per i32 lane) into Lanes/2 bytes, low
// nibble first, without going through memory (a narrow store followed by a
// wider reload would stall on store forwarding).
HWY_INLINE void StorePackedNibbles(VI codes, std::uint8_t* out) {
  const D8 d8;
  const hn::Repartition<std::uint16_t, D8> d16;  // code pairs
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
  const auto pair = hn::BitCast(d16, hn::DemoteTo(d8, codes));
  const auto folded = hn::And(hn::Or(pair, hn::ShiftRight<4>(pair)), hn::Set(d16, std::uint16_t{0xFF}));
  hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, folded)), d8h, out);
}
#endif

#if HWY_TARGET == HWY_AVX2
// 32 E2M1 codes (4 vectors of 8 i32 lanes, in element order) -> 16 bytes, low
// nibble first: 9 instructions instead of 4 x 8 for StorePackedNibbles. Raw
// AVX2 because Highway 1.0's only pairwise ops here are the lane-reordering
// ones, whose order is this target's: packs_epi32 interleaves 128-bit halves
// and madd_epi16 by (1, 16) joins each pair p = even + 16 * odd.
HWY_INLINE void StorePacked32(VI c0, VI c1, VI c2, VI c3, std::uint8_t* out) {
  const __m256i k = _mm256_set1_epi32(0x00100001);
  // i32 pairs: [p0 p1 p4 p5 | p2 p3 p6 p7] and [p8 p9 p12 p13 | p10 p11 p14 p15]
  const __m256i a = _mm256_madd_epi16(_mm256_packs_epi32(c0.raw, c1.raw), k);
  const __m256i b = _mm256_madd_epi16(_mm256_packs_epi32(c2.raw, c3.raw), k);
  // bytes per half: [p0 p1 p4 p5 p8 p9 p12 p13] | [p2 p3 p6 p7 p10 p11 p14 p15]
  const __m256i w = _mm256_packs_epi32(a, b);
  const __m256i bytes = _mm256_packus_epi16(w, w);
  // 16-bit interleave of the halves puts the pairs in order.
  const __m128i r = _mm_unpacklo_epi16(_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(out), r);
}
#endif

// ---------------------------------------------------------------- metrics

struct Acc {
  VF ssr, sse, dot, ssd, mx;
};

HWY_INLINE void AccZero(Acc& a) {
  const DF df;
  a.ssr = a.sse = a.dot = a.ssd = a.mx = hn::Zero(df);
}

HWY_INLINE void AccAdd(Acc& a, VF x, VF dq) {
  const VF e = hn::Sub(x, dq);
  a.ssr = hn::MulAdd(x, x, a.ssr);
  a.sse = hn::MulAdd(e, e, a.sse);
  a.dot = hn::MulAdd(x, dq, a.dot);
  a.ssd = hn::MulAdd(dq, dq, a.ssd);
  a.mx = hn::Max(a.mx, hn::Abs(e));
}

// `a` by value: a reference would take the accumulators' address, and the
// kernels would keep them in memory instead of registers across the loop.
HWY_NOINLINE void AccFlush(const Acc a, ErrorMetrics& m) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  HWY_ALIGN float l[5][kMaxLanes];
  hn::Store(a.ssr, df, l[0]);
  hn::Store(a.sse, df, l[1]);
  hn::Store(a.dot, df, l[2]);
  hn::Store(a.ssd, df, l[3]);
  hn::Store(a.mx, df, l[4]);
  double s[4] = {0, 0, 0, 0};
  float mx = 0.0f;
  for (std::size_t k = 0; k < N; ++k) {
    for (int j = 0; j < 4; ++j) s[j] += l[j][k];
    mx = l[4][k] > mx ? l[4][k] : mx;
  }
  m.sum_sq_ref += s[0];
  m.sum_sq_err += s[1];
  m.sum_dot += s[2];
  m.sum_sq_dq += s[3];
  if (mx > m.max_abs_err) m.max_abs_err = mx;
}

// Sum of the lanes of a clip-count vector (lanes count up: x - (-1)).
HWY_INLINE std::uint64_t ClipCount(VI c) {
  const DI di;
  HWY_ALIGN std::int32_t l[kMaxLanes];
  hn::Store(c, di, l);
  std::uint64_t n = 0;
  for (std::size_t k = 0; k < hn::Lanes(di); ++k) n += static_cast<std::uint64_t>(l[k]);
  return n;
}

// A finished block: its clipped lanes go into the counts (elements and one
// block) and the counter restarts for the next block.
HWY_INLINE void CloseBlock(VI& clipped, ErrorMetrics& m) {
  const DI di;
  if (hn::AllFalse(di, hn::Gt(clipped, hn::Zero(di)))) return;
  m.clipped_elements += ClipCount(clipped);
  m.clipped_blocks += 1;
  clipped = hn::Zero(di);
}

// ---------------------------------------------------------------- kernels

void BlockAmax(const float* x, std::size_t n, std::size_t bw, float* amax) {
  const DI di;
  const std::size_t N = hn::Lanes(di);
  const VI mask = hn::Set(di, 0x7FFFFFFF);
  for (std::size_t b = 0; b * bw < n; ++b) {
    const float* p = x + b * bw;
    VI m = hn::Zero(di);
    // Non-negative bit patterns of finite floats order like their values.
    std::size_t j = 0;
    for (; j + N <= bw; j += N)
      m = hn::Max(m, hn::And(hn::BitCast(di, hn::LoadU(DF(), p + j)), mask));
    std::int32_t bits = hn::GetLane(hn::MaxOfLanes(di, m));
    for (; j < bw; ++j) {
      std::int32_t u;
      std::memcpy(&u, p + j, 4);
      bits = std::max(bits, u & 0x7FFFFFFF);
    }
    std::memcpy(amax + b, &bits, 4);
  }
}

// BF16 -> F32 and the per-block amax in one pass (same bit-pattern max as
// BlockAmax; NaN blocks give NaN bit patterns, Inf blocks Inf).
void LoadBf16BlockAmax(const std::uint16_t* h, std::size_t n, std::size_t bw, float* out,
                       float* amax) {
  const DF df;
  const DI di;
  const DU du;
  const hn::Rebind<std::uint16_t, DU> d16;
  const std::size_t N = hn::Lanes(df);
  const VI mask = hn::Set(di, 0x7FFFFFFF);
  for (std::size_t b = 0; b * bw < n; ++b) {
    const std::uint16_t* p = h + b * bw;
    float* o = out + b * bw;
    VI m = hn::Zero(di);
    std::size_t j = 0;
    for (; j + N <= bw; j += N) {
      const auto w = hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, p + j)));
      hn::StoreU(hn::BitCast(df, w), df, o + j);
      m = hn::Max(m, hn::And(hn::BitCast(di, w), mask));
    }
    std::int32_t bits = hn::GetLane(hn::MaxOfLanes(di, m));
    for (; j < bw; ++j) {
      const std::uint32_t u = static_cast<std::uint32_t>(p[j]) << 16;
      std::memcpy(o + j, &u, 4);
      bits = std::max(bits, static_cast<std::int32_t>(u & 0x7FFFFFFFu));
    }
    std::memcpy(amax + b, &bits, 4);
  }
}

// Powers of two 2^k for integer lanes k in [-127, 127].
HWY_INLINE VF Pow2(VI k) {
  const DI di;
  const VI normal = hn::ShiftLeft<23>(hn::Add(k, hn::Set(di, 127)));
  return hn::BitCast(DF(), hn::IfThenElse(hn::Lt(k, hn::Set(di, -126)), hn::Set(di, 0x00400000), normal));
}

void MxScales(const float* amax, std::size_t nblk, ScaleRule rule, int elem_emax, int elem_mbits,
              float elem_max, std::uint8_t* sbytes, float* inv, float* sc) {
  const DI di;
  const DF df;
  const D8 d8;
  const std::size_t N = hn::Lanes(di);
  const auto body = [&](const float* a_in, std::uint8_t* sb_out, float* inv_out, float* sc_out) {
    const VF af = hn::LoadU(df, a_in);
    VI bits = hn::BitCast(di, af);
    const auto zero = hn::Eq(bits, hn::Zero(di));
    VI unbiased;
    if (rule == ScaleRule::RCeil) {
      const VI db = hn::BitCast(di, hn::Div(af, hn::Set(df, elem_max)));
      const VI dexp = hn::ShiftRight<23>(db);
      const VI mant = hn::And(db, hn::Set(di, 0x7FFFFF));
      const VI nz = hn::IfThenElseZero(hn::Ne(mant, hn::Zero(di)), hn::Set(di, 1));
      const VI sub = hn::IfThenElse(hn::Gt(mant, hn::Set(di, 0x400000)), hn::Set(di, -126), hn::Set(di, -127));
      unbiased = hn::IfThenElse(hn::Eq(dexp, hn::Zero(di)), sub,
                                hn::Add(hn::Sub(dexp, hn::Set(di, 127)), nz));
    } else {
      if (rule == ScaleRule::Even)
        bits = hn::And(hn::Add(bits, hn::Set(di, 1 << (23 - elem_mbits - 1))),
                       hn::Set(di, static_cast<std::int32_t>(0xFF800000u)));
      const VI exp_field = hn::ShiftRight<23>(bits);
      VI floor_log2 = hn::Sub(exp_field, hn::Set(di, 127));
      if (rule == ScaleRule::Ceil) {
        const auto exact = hn::And(hn::Eq(hn::And(bits, hn::Set(di, 0x7FFFFF)), hn::Zero(di)),
                                   hn::Ne(exp_field, hn::Zero(di)));
        floor_log2 = hn::Add(floor_log2, hn::IfThenZeroElse(exact, hn::Set(di, 1)));
      }
      unbiased = hn::Sub(floor_log2, hn::Set(di, elem_emax));
    }
    unbiased = hn::IfThenElse(zero, hn::Set(di, -127), unbiased);
    const VI biased = hn::Min(hn::Max(hn::Add(unbiased, hn::Set(di, 127)), hn::Zero(di)), hn::Set(di, 254));
    hn::StoreU(hn::DemoteTo(d8, biased), d8, sb_out);
    const VI k = hn::Sub(biased, hn::Set(di, 127));
    hn::StoreU(Pow2(hn::Neg(k)), df, inv_out);
    hn::StoreU(Pow2(k), df, sc_out);
  };
  std::size_t i = 0;
  for (; i + N <= nblk; i += N) body(amax + i, sbytes + i, inv + i, sc + i);
  if (i == nblk) return;
  const std::size_t rest = nblk - i;
  HWY_ALIGN float a[kMaxLanes] = {}, fi[kMaxLanes], fs[kMaxLanes];
  HWY_ALIGN std::uint8_t s[kMaxLanes];
  std::memcpy(a, amax + i, rest * 4);
  body(a, s, fi, fs);
  std::memcpy(sbytes + i, s, rest);
  std::memcpy(inv + i, fi, rest * 4);
  std::memcpy(sc + i, fs, rest * 4);
}

void Nvfp4Scales(const float* amax, std::size_t nblk, bool ct, bool bf16, float global,
                 std::uint8_t* sbytes, float* eff, float target) {
  const DI di;
  const DF df;
  const D8 d8;
  const std::size_t N = hn::Lanes(di);
  const VF g = hn::Set(df, global);
  const VF target_g = hn::Set(df, target * global);
  const auto body = [&](const float* a_in, std::uint8_t* sb_out, float* eff_out) {
    const VF a = hn::LoadU(df, a_in);
    VF s;
    if (ct) {
      VF at = hn::Div(a, hn::Set(df, target));
      if (bf16) at = RoundBf16(at);
      s = hn::Mul(g, at);
    } else {
      s = hn::Div(a, target_g);
      s = hn::IfThenElse(hn::Eq(s, hn::Zero(df)), hn::Set(df, 1.0f), s);
    }
    VF val;
    VI code = E4m3(s, val);
    if (ct) {  // a zero scale becomes 0.125 (fp8 eps), code 0x20
      const auto z = hn::Eq(hn::And(code, hn::Set(di, 0x7F)), hn::Zero(di));
      code = hn::IfThenElse(z, hn::Set(di, 0x20), code);
      val = hn::IfThenElse(hn::RebindMask(df, z), hn::Set(df, 0.125f), val);
      hn::StoreU(hn::Div(val, g), df, eff_out);
    } else {
      hn::StoreU(hn::Mul(val, g), df, eff_out);
    }
    hn::StoreU(hn::DemoteTo(d8, code), d8, sb_out);
  };
  std::size_t i = 0;
  for (; i + N <= nblk; i += N) body(amax + i, sbytes + i, eff + i);
  if (i == nblk) return;
  const std::size_t rest = nblk - i;
  HWY_ALIGN float a[kMaxLanes] = {}, fe[kMaxLanes];
  HWY_ALIGN std::uint8_t s[kMaxLanes];
  std::memcpy(a, amax + i, rest * 4);
  body(a, s, fe);
  std::memcpy(sbytes + i, s, rest);
  std::memcpy(eff + i, fe, rest * 4);
}

// kStore false: the same arithmetic and metrics, codes not stored (packed
// may be null; measure_weight).
template <bool kDivide, bool kStore>
HWY_INLINE void E2m1BlocksT(const float* x, std::size_t n, std::size_t bw, const float* d,
                            const float* dqs, float clip_at, std::uint8_t* packed, ErrorMetrics& m) {
  const DF df;
  const DI di;
  [[maybe_unused]] const std::size_t N = hn::Lanes(df);
  const VF clip = hn::Set(df, clip_at);
  const std::size_t nblk = n / bw;  // whole blocks: the schemes require in % bw == 0
  const std::size_t run = std::max<std::size_t>(1, kFlushEvery / bw);
  // One vector of block b: its codes (one per i32 lane), its error sums into
  // acc and its clipped lanes into block_clipped.
  const auto quantize = [&](const float* p, VF dv, VF sv, Acc& acc, VI& block_clipped) {
    const VF xv = hn::LoadU(df, p);
    // -0.0 -> +0.0 (the scalar path's `+ 0.0f`, see e2m1_code). A select,
    // not an add: the compiler may fuse x * d + 0 into an FMA, which keeps
    // the sign of a product that underflows to zero.
    const VF q = kDivide ? hn::Div(xv, dv) : hn::Mul(xv, dv);
    const VF v = hn::IfThenZeroElse(hn::Eq(q, hn::Zero(df)), q);
    VF val;
    const VI code = E2m1(v, val);
    AccAdd(acc, xv, hn::Mul(val, sv));
    block_clipped = hn::Sub(block_clipped, hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(hn::Abs(v), clip))));
    return code;
  };
  // Runs of blocks whose sums stay in float lanes. The accumulators and
  // clip counts are locals of the run, flushed after it: flushing from inside
  // the block loop (through a reference) kept them on the stack, loaded and
  // stored around every 16-element block.
  for (std::size_t b0 = 0; b0 < nblk; b0 += run) {
    const std::size_t b1 = std::min(nblk, b0 + run);
    Acc acc;
    AccZero(acc);
    VI clipped = hn::Zero(di);  // clipped elements of the run, per lane
    std::uint64_t clipped_blocks = 0;
    const auto close_block = [&](VI block_clipped) {
      clipped = hn::Add(clipped, block_clipped);
      clipped_blocks += !hn::AllTrue(di, hn::Eq(block_clipped, hn::Zero(di)));
    };
    std::size_t b = b0;
#if HWY_TARGET == HWY_AVX2
    // 32 elements at a time (two 16-blocks or one 32-block), packed together.
    if (bw == 16 || bw == 32) {
      const std::size_t per = 32 / bw;  // blocks per 32 elements
      for (; b + per <= b1; b += per) {
        const float* p = x + b * bw;
        [[maybe_unused]] VI c[4];
        for (std::size_t k = 0; k < per; ++k) {
          const VF dv = hn::Set(df, d[b + k]), sv = hn::Set(df, dqs[b + k]);
          VI block_clipped = hn::Zero(di);
          for (std::size_t j = 0; j < bw / N; ++j)
            c[k * (bw / N) + j] = quantize(p + k * bw + j * N, dv, sv, acc, block_clipped);
          close_block(block_clipped);
        }
        if constexpr (kStore) StorePacked32(c[0], c[1], c[2], c[3], packed + b * bw / 2);
      }
    }
#endif
    for (; b < b1; ++b) {
      const float* p = x + b * bw;
      const VF dv = hn::Set(df, d[b]), sv = hn::Set(df, dqs[b]);
      VI block_clipped = hn::Zero(di);
#if HWY_TARGET != HWY_SCALAR
      for (std::size_t j = 0; j < bw; j += N) {
        [[maybe_unused]] const VI code = quantize(p + j, dv, sv, acc, block_clipped);
        if constexpr (kStore) StorePackedNibbles(code, packed + (b * bw + j) / 2);
      }
#else  // one code per vector
      for (std::size_t j = 0; j < bw; j += 2) {
        [[maybe_unused]] const auto lo = hn::GetLane(quantize(p + j, dv, sv, acc, block_clipped));
        [[maybe_unused]] const auto hi = hn::GetLane(quantize(p + j + 1, dv, sv, acc, block_clipped));
        if constexpr (kStore) packed[(b * bw + j) / 2] = static_cast<std::uint8_t>(lo | hi << 4);
      }
#endif
      close_block(block_clipped);
    }
    AccFlush(acc, m);
    m.clipped_elements += ClipCount(clipped);
    m.clipped_blocks += clipped_blocks;
  }
  m.elements += n;
}

void E2m1Blocks(const float* x, std::size_t n, std::size_t bw, const float* d, const float* dqs,
                bool divide, float clip_at, std::uint8_t* packed, ErrorMetrics& m) {
  if (packed == nullptr) {
    if (divide)
      E2m1BlocksT<true, false>(x, n, bw, d, dqs, clip_at, packed, m);
    else
      E2m1BlocksT<false, false>(x, n, bw, d, dqs, clip_at, packed, m);
  } else if (divide) {
    E2m1BlocksT<true, true>(x, n, bw, d, dqs, clip_at, packed, m);
  } else {
    E2m1BlocksT<false, true>(x, n, bw, d, dqs, clip_at, packed, m);
  }
}

template <bool kDivide, bool kBf16, bool kStore>  // kStore: as E2m1BlocksT
HWY_INLINE void E4m3BlocksT(const float* x, std::size_t n, std::size_t bw, const float* d,
                            const float* dqs, float clip_at, std::uint8_t* codes, ErrorMetrics& m) {
  const DF df;
  const DI di;
  const D8 d8;
  const std::size_t N = hn::Lanes(df);
  const VF clip = hn::Set(df, clip_at);
  Acc acc;
  AccZero(acc);
  std::size_t since_flush = 0;
  VI clipped = hn::Zero(di);
  const auto step = [&](const float* p, std::uint8_t* q, VF dv, VF sv) {
    const VF xv = hn::LoadU(df, p);
    VF v = kDivide ? hn::Div(xv, dv) : hn::Mul(xv, dv);
    if (kBf16) v = RoundBf16(v);
    VF val;
    [[maybe_unused]] const VI code = E4m3(v, val);
    AccAdd(acc, xv, hn::Mul(val, sv));
    clipped = hn::Sub(clipped, hn::VecFromMask(di, hn::RebindMask(di, hn::Ge(hn::Abs(v), clip))));
    if constexpr (kStore) hn::StoreU(hn::DemoteTo(d8, code), d8, q);
    if ((since_flush += N) >= kFlushEvery) {
      AccFlush(acc, m);
      AccZero(acc);
      since_flush = 0;
    }
  };
  for (std::size_t b = 0; b * bw < n; ++b) {
    const std::size_t c0 = b * bw, c1 = c0 + bw < n ? c0 + bw : n;
    const VF dv = hn::Set(df, d[b]);
    const VF sv = hn::Set(df, dqs[b]);
    std::size_t c = c0;
    for (; c + N <= c1; c += N) step(x + c, kStore ? codes + c : nullptr, dv, sv);
    if (c < c1) {  // zero padding adds nothing to the sums and clips nothing
      HWY_ALIGN float in_buf[kMaxLanes] = {};
      HWY_ALIGN std::uint8_t out_buf[kMaxLanes];
      std::memcpy(in_buf, x + c, (c1 - c) * 4);
      step(in_buf, out_buf, dv, sv);
      if constexpr (kStore) std::memcpy(codes + c, out_buf, c1 - c);
    }
    CloseBlock(clipped, m);
  }
  AccFlush(acc, m);
  m.elements += n;
}

void E4m3Blocks(const float* x, std::size_t n, std::size_t bw, const float* d, const float* dqs,
                bool divide, bool round_bf16, float clip_at, std::uint8_t* codes, ErrorMetrics& m) {
  const auto run = [&]<bool kStore>() {
    if (divide) {
      if (round_bf16)
        E4m3BlocksT<true, true, kStore>(x, n, bw, d, dqs, clip_at, codes, m);
      else
        E4m3BlocksT<true, false, kStore>(x, n, bw, d, dqs, clip_at, codes, m);
    } else {
      if (round_bf16)
        E4m3BlocksT<false, true, kStore>(x, n, bw, d, dqs, clip_at, codes, m);
      else
        E4m3BlocksT<false, false, kStore>(x, n, bw, d, dqs, clip_at, codes, m);
    }
  };
  if (codes == nullptr)
    run.template operator()<false>();
  else
    run.template operator()<true>();
}

// ---------------------------------------------------------------- int

void BlockMinMax(const float* x, std::size_t n, std::size_t gw, float* mn, float* mx) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  for (std::size_t g = 0; g * gw < n; ++g) {
    const float* p = x + g * gw;
    // Starting from zero is the scalar loop's min(0, ...) / max(0, ...).
    VF lo = hn::Zero(df), hi = hn::Zero(df);
    std::size_t j = 0;
    for (; j + N <= gw; j += N) {
      const VF v = hn::LoadU(df, p + j);
      lo = hn::Min(lo, v);
      hi = hn::Max(hi, v);
    }
    float l = hn::GetLane(hn::MinOfLanes(df, lo)), h = hn::GetLane(hn::MaxOfLanes(df, hi));
    for (; j < gw; ++j) {
      l = std::min(l, p[j]);
      h = std::max(h, p[j]);
    }
    // A -0.0 from a lane minimum is +0.0 for the scalar loop (std::min keeps
    // its first argument on ties); only the sign of zero can differ.
    mn[g] = std::min(0.0f, l);
    mx[g] = std::max(0.0f, h);
  }
}

template <bool kAsym, bool kBf16, bool kStore>  // kStore: as E2m1BlocksT
HWY_INLINE void IntGroupsT(const float* x, std::size_t n, std::size_t gw, const float* s,
                           const float* zp, float qmin, float qmax, int offset,
                           std::uint8_t* codes, ErrorMetrics& m) {
  const DF df;
  const DI di;
  const std::size_t N = hn::Lanes(df);
  const VF lo1 = hn::Set(df, qmin - 1.0f), hi1 = hn::Set(df, qmax + 1.0f);
  const VF lo = hn::Set(df, qmin), hi = hn::Set(df, qmax);
  const VF magic = hn::Set(df, 12582912.0f);  // 1.5 * 2^23: adds round to integers (RNE)
  const VI off = hn::Set(di, offset);
  Acc acc;
  AccZero(acc);
  std::size_t since_flush = 0;
  VI clipped = hn::Zero(di);
  const auto step = [&](const float* p, std::uint8_t* out, VF sv, VF zv) {
    const VF xv = hn::LoadU(df, p);
    VF v = hn::Div(xv, sv);
    if (kBf16) v = RoundBf16(v);
    if (kAsym) {
      v = hn::Add(v, zv);
      if (kBf16) v = RoundBf16(v);
    }
    const VF q = hn::Sub(hn::Add(hn::Min(hn::Max(v, lo1), hi1), magic), magic);
    const VF qc = hn::Min(hn::Max(q, lo), hi);
    clipped = hn::Sub(clipped, hn::VecFromMask(di, hn::RebindMask(di, hn::Ne(q, qc))));
    AccAdd(acc, xv, hn::Mul(hn::Sub(qc, zv), sv));
    if constexpr (kStore) {
      const VI code = hn::Add(hn::ConvertTo(di, qc), off);
      // Truncation to the low byte: codes are in [0, 255] (offset binary) or
      // [-128, 127] (signed int8); each demotes exactly with its own signedness.
      if (offset > 0)
        hn::StoreU(hn::DemoteTo(D8(), code), D8(), out);
      else
        hn::StoreU(hn::DemoteTo(hn::Rebind<std::int8_t, DI>(), code), hn::Rebind<std::int8_t, DI>(),
                   reinterpret_cast<std::int8_t*>(out));
    }
    if ((since_flush += N) >= kFlushEvery) {
      AccFlush(acc, m);
      AccZero(acc);
      since_flush = 0;
    }
  };
  for (std::size_t g = 0; g * gw < n; ++g) {
    const std::size_t c0 = g * gw, c1 = c0 + gw;
    const VF sv = hn::Set(df, s[g]);
    const VF zv = hn::Set(df, kAsym ? zp[g] : 0.0f);
    std::size_t c = c0;
    for (; c + N <= c1; c += N) step(x + c, kStore ? codes + c : nullptr, sv, zv);
    if (c < c1) {  // zeros quantize to the zero point: no error, no clipping
      HWY_ALIGN float in_buf[kMaxLanes] = {};
      HWY_ALIGN std::uint8_t out_buf[kMaxLanes];
      std::memcpy(in_buf, x + c, (c1 - c) * 4);
      step(in_buf, out_buf, sv, zv);
      if constexpr (kStore) std::memcpy(codes + c, out_buf, c1 - c);
    }
    m.blocks += 1;
    CloseBlock(clipped, m);
  }
  AccFlush(acc, m);
  m.elements += n;
}

void IntGroups(const float* x, std::size_t n, std::size_t gw, const float* s, const float* zp,
               bool asym, bool round_bf16, float qmin, float qmax, int offset, std::uint8_t* codes,
               ErrorMetrics& m) {
  const auto run = [&]<bool kStore>() {
    if (asym) {
      if (round_bf16)
        IntGroupsT<true, true, kStore>(x, n, gw, s, zp, qmin, qmax, offset, codes, m);
      else
        IntGroupsT<true, false, kStore>(x, n, gw, s, zp, qmin, qmax, offset, codes, m);
    } else {
      if (round_bf16)
        IntGroupsT<false, true, kStore>(x, n, gw, s, zp, qmin, qmax, offset, codes, m);
      else
        IntGroupsT<false, false, kStore>(x, n, gw, s, zp, qmin, qmax, offset, codes, m);
    }
  };
  if (codes == nullptr)
    run.template operator()<false>();
  else
    run.template operator()<true>();
}

}  // namespace HWY_NAMESPACE
}  // namespace selq::quant::detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq::quant::detail {

HWY_EXPORT(BlockAmax);
HWY_EXPORT(MxScales);
HWY_EXPORT(Nvfp4Scales);
HWY_EXPORT(E2m1Blocks);
HWY_EXPORT(E4m3Blocks);
HWY_EXPORT(BlockMinMax);
HWY_EXPORT(LoadBf16BlockAmax);
HWY_EXPORT(IntGroups);

void block_amax_simd(const float* x, std::size_t n, std::size_t bw, float* amax) {
  HWY_DYNAMIC_DISPATCH(BlockAmax)(x, n, bw, amax);
}
void mx_scales_simd(const float* amax, std::size_t nblk, ScaleRule rule, int elem_emax,
                    int elem_mbits, float elem_max, std::uint8_t* sbytes, float* inv, float* sc) {
  HWY_DYNAMIC_DISPATCH(MxScales)(amax, nblk, rule, elem_emax, elem_mbits, elem_max, sbytes, inv, sc);
}
void nvfp4_scales_simd(const float* amax, std::size_t nblk, bool ct, bool bf16, float global,
                       std::uint8_t* sbytes, float* eff, float target) {
  HWY_DYNAMIC_DISPATCH(Nvfp4Scales)(amax, nblk, ct, bf16, global, sbytes, eff, target);
}
void e2m1_blocks_simd(const float* x, std::size_t n, std::size_t bw, const float* d,
                      const float* dqs, bool divide, float clip_at, std::uint8_t* packed,
                      ErrorMetrics& m) {
  HWY_DYNAMIC_DISPATCH(E2m1Blocks)(x, n, bw, d, dqs, divide, clip_at, packed, m);
}
void e4m3_blocks_simd(const float* x, std::size_t n, std::size_t bw, const float* d,
                      const float* dqs, bool divide, bool round_bf16, float clip_at,
                      std::uint8_t* codes, ErrorMetrics& m) {
  HWY_DYNAMIC_DISPATCH(E4m3Blocks)(x, n, bw, d, dqs, divide, round_bf16, clip_at, codes, m);
}

void load_bf16_block_amax_simd(const std::uint16_t* h, std::size_t n, std::size_t bw, float* out,
                               float* amax) {
  HWY_DYNAMIC_DISPATCH(LoadBf16BlockAmax)(h, n, bw, out, amax);
}
void block_minmax_simd(const float* x, std::size_t n, std::size_t gw, float* mn, float* mx) {
  HWY_DYNAMIC_DISPATCH(BlockMinMax)(x, n, gw, mn, mx);
}
void int_groups_simd(const float* x, std::size_t n, std::size_t gw, const float* s,
                     const float* zp, bool asym, bool round_bf16, float qmin, float qmax,
                     int offset, std::uint8_t* codes, ErrorMetrics& m) {
  HWY_DYNAMIC_DISPATCH(IntGroups)(x, n, gw, s, zp, asym, round_bf16, qmin, qmax, offset, codes, m);
}

}  // namespace selq::quant::detail
#endif  // HWY_ONCE
