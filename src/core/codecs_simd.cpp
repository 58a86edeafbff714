// Highway compiles this file once per target: foreach_target.h re-includes it
// through HWY_TARGET_INCLUDE with a different HWY_NAMESPACE each time, and
// HWY_DYNAMIC_DISPATCH picks the best one the CPU supports at run time.
//
// All rounding is done with integer arithmetic on the f32 bit pattern (RNE by
// adding 0x7F..F plus the kept LSB, then shifting) or, for the subnormal
// ranges of the small formats, by adding a power-of-two "magic" float whose
// ulp equals the target quantum, so the FPU's own RNE does the rounding. Both
// are exact for every input; the unit tests compare all 65,536 BF16 values and
// random F32 against the scalar references.
#include <cstring>

#include "core/codecs.h"
#include "core/codecs_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/codecs_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace selq {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VI = hn::Vec<DI>;
using D8 = hn::Rebind<std::uint8_t, DI>;     // one byte per f32 lane
using D16 = hn::Rebind<std::uint16_t, DI>;   // one u16 per f32 lane

// Largest lane count of any vector this target can have; sizes tail buffers.
constexpr std::size_t kMaxF32Lanes = HWY_MAX_BYTES / sizeof(float);

HWY_INLINE VI LoadF32Bits(const float* p) { return hn::BitCast(DI(), hn::LoadU(DF(), p)); }

HWY_INLINE VI LoadBf16Bits(const std::uint16_t* p) {
  const DI di;
  const DU du;
  return hn::BitCast(di, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(D16(), p))));
}

// ---------------------------------------------------------------- kernels
// Each takes the f32 bit pattern in i32 lanes and returns the code in the low
// bits of each lane.

HWY_INLINE VI Bf16FromBits(VI u) {
  const DI di;
  const VI a = hn::And(u, hn::Set(di, 0x7FFFFFFF));
  const auto is_nan = hn::Gt(a, hn::Set(di, 0x7F800000));
  // Logical shifts: the sign bit must not smear into the kept half.
  const DU du;
  const auto uu = hn::BitCast(du, u);
  const auto lsb = hn::And(hn::ShiftRight<16>(uu), hn::Set(du, 1u));
  const auto rounded = hn::ShiftRight<16>(hn::Add(hn::Add(uu, hn::Set(du, 0x7FFFu)), lsb));
  const auto quiet = hn::Or(hn::ShiftRight<16>(uu), hn::Set(du, 0x40u));
  return hn::BitCast(di, hn::IfThenElse(hn::RebindMask(du, is_nan), quiet, rounded));
}

// |x| clamped to `max_bits`, sign moved to `sign_bit`; NaN handled by caller.
struct SplitSign {
  VI mag;   // clamped magnitude bits (non-negative, so signed compares work)
  VI sign;  // sign already shifted into the code's sign position
  hn::Mask<DI> nan;
};

template <int kSignShift>
HWY_INLINE SplitSign Split(VI u, std::int32_t max_bits) {
  const DI di;
  const DU du;
  const VI a = hn::And(u, hn::Set(di, 0x7FFFFFFF));
  SplitSign s;
  s.nan = hn::Gt(a, hn::Set(di, 0x7F800000));
  s.mag = hn::Min(a, hn::Set(di, max_bits));  // also turns ±Inf into ±max
  s.sign = hn::BitCast(di, hn::ShiftLeft<kSignShift>(hn::ShiftRight<31>(hn::BitCast(du, u))));
  return s;
}

// Rounds a clamped magnitude to a format with `kMbits` mantissa bits, bias
// `kBias`, whose smallest normal has f32 bits `min_normal_bits`.
template <int kMbits, int kBias>
HWY_INLINE VI RoundMagnitude(VI mag, std::int32_t min_normal_bits) {
  const DI di;
  const DF df;
  constexpr int kDrop = 23 - kMbits;
  // Normal range: RNE on the bit pattern; a carry out of the mantissa bumps
  // the exponent, which is exactly the next binade's code.
  const VI odd = hn::And(hn::ShiftRight<kDrop>(mag), hn::Set(di, 1));
  const VI biased = hn::Add(hn::Add(mag, hn::Set(di, (1 << (kDrop - 1)) - 1)), odd);
  const VI normal =
      hn::Sub(hn::ShiftRight<kDrop>(biased), hn::Set(di, (127 - kBias) << kMbits));
  // Subnormal range: the magic number 2^(emin - mbits + 23) has an ulp equal
  // to the subnormal quantum, so the float add rounds |x| onto the grid.
  constexpr std::int32_t kMagic = (127 + (1 - kBias) - kMbits + 23) << 23;
  const auto magic = hn::BitCast(df, hn::Set(di, kMagic));
  const VI sub =
      hn::Sub(hn::BitCast(di, hn::Add(hn::BitCast(df, mag), magic)), hn::Set(di, kMagic));
  return hn::IfThenElse(hn::Lt(mag, hn::Set(di, min_normal_bits)), sub, normal);
}

HWY_INLINE VI E4m3SatFromBits(VI u) {
  const DI di;
  const SplitSign s = Split<7>(u, 0x43E00000);  // 448
  const VI mag = RoundMagnitude<3, 7>(s.mag, 0x3C800000);  // min normal 2^-6
  return hn::Or(hn::IfThenElse(s.nan, hn::Set(di, 0x7F), mag), s.sign);
}

HWY_INLINE VI E2m1FromBits(VI u) {
  const DI di;
  const SplitSign s = Split<3>(u, 0x40C00000);  // 6
  const VI mag = RoundMagnitude<1, 1>(s.mag, 0x3F800000);  // min normal 1.0
  // NaN -> ±6, matching f32_to_e2m1_ref (see codecs.cpp for why).
  return hn::Or(hn::IfThenElse(s.nan, hn::Set(di, 0x7), mag), s.sign);
}

HWY_INLINE void StoreBytes(VI codes, std::uint8_t* out) {
  const D8 d8;
  hn::StoreU(hn::DemoteTo(d8, codes), d8, out);
}

// Packs one vector of E2M1 codes (one per i32 lane) into Lanes/2 bytes.
HWY_INLINE void StorePackedNibbles(VI codes, std::uint8_t* out) {
  const D8 d8;
  const hn::Repartition<std::uint16_t, D8> d16;  // pairs of codes
  const hn::RebindToSigned<decltype(d16)> di16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
  // Little-endian: each u16 is code[2i] | code[2i+1] << 8; fold the high byte
  // down by 4 so the pair becomes one byte.
  const auto pair = hn::BitCast(d16, hn::DemoteTo(d8, codes));
  const auto folded = hn::And(hn::Or(pair, hn::ShiftRight<4>(pair)), hn::Set(d16, 0xFF));
  hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, folded)), d8h, out);
}

// Runs `body(in_ptr, out_ptr)` over whole vectors, then once more over a
// zero-padded copy of the tail so that the tail goes through the same kernel.
// kOutNum2: output elements per input element, times 2 (1 for packed nibbles).
template <typename TIn, typename TOut, int kOutNum2, class Body>
HWY_INLINE void ForEachVector(const TIn* in, TOut* out, std::size_t n, Body body) {
  const std::size_t N = hn::Lanes(DF());
  std::size_t i = 0;
  for (; i + N <= n; i += N) body(in + i, out + i * kOutNum2 / 2);
  if (i == n) return;
  const std::size_t rest = n - i;
  HWY_ALIGN TIn in_buf[kMaxF32Lanes] = {};
  HWY_ALIGN TOut out_buf[kMaxF32Lanes] = {};
  std::memcpy(in_buf, in + i, rest * sizeof(TIn));
  body(in_buf, out_buf);
  std::memcpy(out + i * kOutNum2 / 2, out_buf, (rest * kOutNum2 + 1) / 2 * sizeof(TOut));
}

// BF16 sources take a whole u16 vector (2x the f32 lanes) per step: zipping
// with zero widens to two f32-bit vectors, and the saturating i32->i16 pack
// undoes the zip's per-128-bit-block lane order, so codes come out in element
// order (the unit tests check this on every target) at half the shuffles of
// widening each half separately.
using DU16 = hn::ScalableTag<std::uint16_t>;
using DI16 = hn::ScalableTag<std::int16_t>;
using DU8H = hn::Rebind<std::uint8_t, DI16>;  // one byte per u16 lane

template <class Kernel>
HWY_INLINE hn::Vec<DI16> Bf16Codes(const std::uint16_t* p, Kernel kernel) {
  const DU16 d16;
  const DU du;
  const DI di;
  const auto v = hn::LoadU(d16, p);
  const auto z = hn::Zero(d16);
  const VI lo = hn::BitCast(di, hn::ZipLower(du, z, v));
  const VI hi = hn::BitCast(di, hn::ZipUpper(du, z, v));
  return hn::ReorderDemote2To(DI16(), kernel(lo), kernel(hi));
}

template <int kOutNum2, class Body>
HWY_INLINE void ForEachBf16Vector(const std::uint16_t* in, std::uint8_t* out, std::size_t n,
                                  Body body) {
  const std::size_t N = hn::Lanes(DU16());
  std::size_t i = 0;
  for (; i + N <= n; i += N) body(in + i, out + i * kOutNum2 / 2);
  if (i == n) return;
  const std::size_t rest = n - i;
  HWY_ALIGN std::uint16_t in_buf[2 * kMaxF32Lanes] = {};
  HWY_ALIGN std::uint8_t out_buf[2 * kMaxF32Lanes] = {};
  std::memcpy(in_buf, in + i, rest * sizeof(std::uint16_t));
  body(in_buf, out_buf);
  std::memcpy(out + i * kOutNum2 / 2, out_buf, (rest * kOutNum2 + 1) / 2);
}

// ---------------------------------------------------------------- entry points

void Bf16ToF32(const std::uint16_t* in, float* out, std::size_t n) {
  ForEachVector<std::uint16_t, float, 2>(in, out, n, [](const std::uint16_t* p, float* q) {
    hn::StoreU(hn::BitCast(DF(), LoadBf16Bits(p)), DF(), q);
  });
}

void F32ToBf16(const float* in, std::uint16_t* out, std::size_t n) {
  ForEachVector<float, std::uint16_t, 2>(in, out, n, [](const float* p, std::uint16_t* q) {
    const D16 d16;
    hn::StoreU(hn::DemoteTo(d16, Bf16FromBits(LoadF32Bits(p))), d16, q);
  });
}

void F32ToE4m3Sat(const float* in, std::uint8_t* out, std::size_t n) {
  ForEachVector<float, std::uint8_t, 2>(in, out, n, [](const float* p, std::uint8_t* q) {
    StoreBytes(E4m3SatFromBits(LoadF32Bits(p)), q);
  });
}

void Bf16ToE4m3Sat(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  ForEachBf16Vector<2>(in, out, n, [](const std::uint16_t* p, std::uint8_t* q) {
    const DU8H d8;
    hn::StoreU(hn::DemoteTo(d8, Bf16Codes(p, E4m3SatFromBits)), d8, q);
  });
}

void F32ToE2m1(const float* in, std::uint8_t* out, std::size_t n) {
  ForEachVector<float, std::uint8_t, 2>(in, out, n, [](const float* p, std::uint8_t* q) {
    StoreBytes(E2m1FromBits(LoadF32Bits(p)), q);
  });
}

void F32ToE2m1Packed(const float* in, std::uint8_t* out, std::size_t n) {
  ForEachVector<float, std::uint8_t, 1>(in, out, n, [](const float* p, std::uint8_t* q) {
    StorePackedNibbles(E2m1FromBits(LoadF32Bits(p)), q);
  });
}

void Bf16ToE2m1Packed(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  ForEachBf16Vector<1>(in, out, n, [](const std::uint16_t* p, std::uint8_t* q) {
    const DU8H d8;
    const hn::Repartition<std::uint16_t, DU8H> d16;
    const hn::RebindToSigned<decltype(d16)> di16;
    const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
    const auto pair = hn::BitCast(d16, hn::DemoteTo(d8, Bf16Codes(p, E2m1FromBits)));
    const auto folded = hn::And(hn::Or(pair, hn::ShiftRight<4>(pair)), hn::Set(d16, 0xFF));
    hn::StoreU(hn::DemoteTo(d8h, hn::BitCast(di16, folded)), d8h, q);
  });
}

void E4m3ToF32(const std::uint8_t* in, float* out, std::size_t n) {
  ForEachVector<std::uint8_t, float, 2>(in, out, n, [](const std::uint8_t* p, float* q) {
    const DI di;
    const DF df;
    const VI v = hn::PromoteTo(di, hn::LoadU(D8(), p));
    const VI m = hn::And(v, hn::Set(di, 0x7F));
    const DU du;  // unsigned shift: moving a bit into the sign is UB for int
    const VI sign = hn::BitCast(di, hn::ShiftLeft<24>(hn::BitCast(du, hn::And(v, hn::Set(di, 0x80)))));
    // Normal: shift exponent/mantissa into place and rebias 7 -> 127.
    const VI normal = hn::Add(hn::ShiftLeft<20>(m), hn::Set(di, 120 << 23));
    // Subnormal: mantissa * 2^-9, exact in f32.
    const VI sub = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, m), hn::Set(df, 1.0f / 512)));
    VI r = hn::Or(hn::IfThenElse(hn::Lt(m, hn::Set(di, 8)), sub, normal), sign);
    // e4m3_to_f32 returns the default quiet NaN, sign dropped.
    r = hn::IfThenElse(hn::Eq(m, hn::Set(di, 0x7F)), hn::Set(di, 0x7FC00000), r);
    hn::StoreU(hn::BitCast(df, r), df, q);
  });
}

void E2m1PackedToF32(const std::uint8_t* in, float* out, std::size_t n) {
  // `in` advances half a byte per lane, hence the custom loop: one vector of
  // output consumes Lanes/2 packed bytes.
  const DI di;
  const DF df;
  const D8 d8;
  const hn::Repartition<std::uint16_t, D8> d16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8h;
  const auto decode = [&](const std::uint8_t* p, float* q) {
    const auto b = hn::PromoteTo(d16, hn::LoadU(d8h, p));
    // Spread each byte's two nibbles into two bytes, in element order.
    const auto spread =
        hn::Or(hn::And(b, hn::Set(d16, 0x0F)), hn::ShiftLeft<8>(hn::ShiftRight<4>(b)));
    const VI c = hn::PromoteTo(di, hn::BitCast(d8, spread));
    const VI m = hn::And(c, hn::Set(di, 7));
    const VI sign =
        hn::BitCast(di, hn::ShiftLeft<28>(hn::BitCast(DU(), hn::And(c, hn::Set(di, 8)))));
    const VI normal = hn::Add(hn::ShiftLeft<22>(m), hn::Set(di, 126 << 23));
    const VI sub = hn::BitCast(di, hn::Mul(hn::ConvertTo(df, m), hn::Set(df, 0.5f)));
    const VI r = hn::Or(hn::IfThenElse(hn::Lt(m, hn::Set(di, 2)), sub, normal), sign);
    hn::StoreU(hn::BitCast(df, r), df, q);
  };
  const std::size_t N = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + N <= n; i += N) decode(in + i / 2, out + i);
  if (i == n) return;
  const std::size_t rest = n - i;
  HWY_ALIGN std::uint8_t in_buf[kMaxF32Lanes] = {};
  HWY_ALIGN float out_buf[kMaxF32Lanes];
  std::memcpy(in_buf, in + i / 2, (rest + 1) / 2);
  decode(in_buf, out_buf);
  std::memcpy(out + i, out_buf, rest * sizeof(float));
}

void ScaleF32(const float* in, float* out, std::size_t n, float divisor) {
  const DF df;
  const auto d = hn::Set(df, divisor);
  ForEachVector<float, float, 2>(in, out, n, [&](const float* p, float* q) {
    hn::StoreU(hn::Div(hn::LoadU(df, p), d), df, q);
  });
}

// Max of |x| as integers: for non-negative floats the bit patterns order like
// the values, and every NaN pattern is above +Inf, so NaN wins automatically.
float AmaxF32(const float* in, std::size_t n) {
  const DU du;
  const std::size_t N = hn::Lanes(du);
  const auto mask = hn::Set(du, 0x7FFFFFFFu);
  auto m0 = hn::Zero(du), m1 = hn::Zero(du);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = hn::Max(m0, hn::And(hn::BitCast(du, hn::LoadU(DF(), in + i)), mask));
    m1 = hn::Max(m1, hn::And(hn::BitCast(du, hn::LoadU(DF(), in + i + N)), mask));
  }
  HWY_ALIGN std::uint32_t lanes[kMaxF32Lanes];
  hn::Store(hn::Max(m0, m1), du, lanes);
  std::uint32_t best = 0;
  for (std::size_t k = 0; k < N; ++k) best = lanes[k] > best ? lanes[k] : best;
  for (; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, in + i, 4);
    b &= 0x7FFFFFFFu;
    best = b > best ? b : best;
  }
  float f;
  std::memcpy(&f, &best, 4);
  return f;
}

float AmaxBf16(const std::uint16_t* in, std::size_t n) {
  const hn::ScalableTag<std::uint16_t> d;
  const std::size_t N = hn::Lanes(d);
  const auto mask = hn::Set(d, std::uint16_t{0x7FFF});
  auto m0 = hn::Zero(d), m1 = hn::Zero(d);
  std::size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    m0 = hn::Max(m0, hn::And(hn::LoadU(d, in + i), mask));
    m1 = hn::Max(m1, hn::And(hn::LoadU(d, in + i + N), mask));
  }
  HWY_ALIGN std::uint16_t lanes[HWY_MAX_BYTES / 2];
  hn::Store(hn::Max(m0, m1), d, lanes);
  std::uint16_t best = 0;
  for (std::size_t k = 0; k < N; ++k) best = lanes[k] > best ? lanes[k] : best;
  for (; i < n; ++i) {
    const std::uint16_t b = in[i] & 0x7FFF;
    best = b > best ? b : best;
  }
  return bf16_to_f32(best);
}

#else  // HWY_TARGET == HWY_SCALAR

// Single-lane fallback (compiled as the static target by g++ < 12.3, where
// Highway's EMU128 is disabled; only CPUs without SSSE3 run it): the scalar
// oracles themselves, so it is correct by construction.
template <typename TIn, typename TOut, class F>
void MapRef(const TIn* in, TOut* out, std::size_t n, F f) {
  for (std::size_t i = 0; i < n; ++i) out[i] = f(in[i]);
}
void Bf16ToF32(const std::uint16_t* in, float* out, std::size_t n) { MapRef(in, out, n, bf16_to_f32); }
void F32ToBf16(const float* in, std::uint16_t* out, std::size_t n) {
  MapRef(in, out, n, f32_to_bf16_ref);
}
void F32ToE4m3Sat(const float* in, std::uint8_t* out, std::size_t n) {
  MapRef(in, out, n, f32_to_e4m3_sat_ref);
}
void Bf16ToE4m3Sat(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  MapRef(in, out, n, [](std::uint16_t b) { return f32_to_e4m3_sat_ref(bf16_to_f32(b)); });
}
void F32ToE2m1(const float* in, std::uint8_t* out, std::size_t n) {
  MapRef(in, out, n, f32_to_e2m1_ref);
}
template <typename TIn, class F>
void PackRef(const TIn* in, std::uint8_t* out, std::size_t n, F to_f32) {
  for (std::size_t i = 0; i < n; i += 2) {
    const std::uint8_t lo = f32_to_e2m1_ref(to_f32(in[i]));
    const std::uint8_t hi = i + 1 < n ? f32_to_e2m1_ref(to_f32(in[i + 1])) : 0;
    out[i / 2] = static_cast<std::uint8_t>(lo | (hi << 4));
  }
}
void F32ToE2m1Packed(const float* in, std::uint8_t* out, std::size_t n) {
  PackRef(in, out, n, [](float f) { return f; });
}
void Bf16ToE2m1Packed(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  PackRef(in, out, n, bf16_to_f32);
}
void E4m3ToF32(const std::uint8_t* in, float* out, std::size_t n) { MapRef(in, out, n, e4m3_to_f32); }
void E2m1PackedToF32(const std::uint8_t* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = e2m1_to_f32((in[i / 2] >> (4 * (i & 1))) & 0xF);
}
void ScaleF32(const float* in, float* out, std::size_t n, float divisor) {
  for (std::size_t i = 0; i < n; ++i) out[i] = in[i] / divisor;
}
float AmaxF32(const float* in, std::size_t n) {
  std::uint32_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t b;
    std::memcpy(&b, in + i, 4);
    b &= 0x7FFFFFFFu;
    best = b > best ? b : best;
  }
  float f;
  std::memcpy(&f, &best, 4);
  return f;
}
float AmaxBf16(const std::uint16_t* in, std::size_t n) {
  std::uint16_t best = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint16_t b = in[i] & 0x7FFF;
    best = b > best ? b : best;
  }
  return bf16_to_f32(best);
}

#endif  // HWY_TARGET != HWY_SCALAR

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace selq
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq {

HWY_EXPORT(Bf16ToF32);
HWY_EXPORT(F32ToBf16);
HWY_EXPORT(F32ToE4m3Sat);
HWY_EXPORT(Bf16ToE4m3Sat);
HWY_EXPORT(F32ToE2m1);
HWY_EXPORT(F32ToE2m1Packed);
HWY_EXPORT(Bf16ToE2m1Packed);
HWY_EXPORT(E4m3ToF32);
HWY_EXPORT(E2m1PackedToF32);
HWY_EXPORT(ScaleF32);
HWY_EXPORT(AmaxF32);
HWY_EXPORT(AmaxBf16);
HWY_EXPORT(TargetName);

void bf16_to_f32_bulk(const std::uint16_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(Bf16ToF32)(in, out, n);
}
void f32_to_bf16_bulk(const float* in, std::uint16_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToBf16)(in, out, n);
}
void f32_to_e4m3_sat_bulk(const float* in, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToE4m3Sat)(in, out, n);
}
void bf16_to_e4m3_sat_bulk(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(Bf16ToE4m3Sat)(in, out, n);
}
void f32_to_e2m1_bulk(const float* in, std::uint8_t* codes, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToE2m1)(in, codes, n);
}
void f32_to_e2m1_packed_bulk(const float* in, std::uint8_t* packed, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(F32ToE2m1Packed)(in, packed, n);
}
void bf16_to_e2m1_packed_bulk(const std::uint16_t* in, std::uint8_t* packed, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(Bf16ToE2m1Packed)(in, packed, n);
}
void e4m3_to_f32_bulk(const std::uint8_t* in, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(E4m3ToF32)(in, out, n);
}
void e2m1_packed_to_f32_bulk(const std::uint8_t* packed, float* out, std::size_t n) {
  HWY_DYNAMIC_DISPATCH(E2m1PackedToF32)(packed, out, n);
}
void scale_f32_bulk(const float* in, float* out, std::size_t n, float divisor) {
  HWY_DYNAMIC_DISPATCH(ScaleF32)(in, out, n, divisor);
}
float amax_f32(const float* in, std::size_t n) { return HWY_DYNAMIC_DISPATCH(AmaxF32)(in, n); }
float amax_bf16(const std::uint16_t* in, std::size_t n) {
  return HWY_DYNAMIC_DISPATCH(AmaxBf16)(in, n);
}
const char* codecs_simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace selq
#endif  // HWY_ONCE
