// The element grids in vector lanes, one copy per SIMD target: the row
// kernels' rounding of a quotient onto E2M1 and E4M3 (code and value
// together) and onto BF16 (kernels_simd.cpp), which the `mse` search's
// error measure reads too (rounding_mse.cpp), so that the error it compares
// is the stored block's. Included after <hwy/highway.h> by files that
// foreach_target.h compiles once per target, hence the toggling guard.
#if defined(SELQ_QUANT_GRID_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SELQ_QUANT_GRID_SIMD_INL_H_
#undef SELQ_QUANT_GRID_SIMD_INL_H_
#else
#define SELQ_QUANT_GRID_SIMD_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace selq::quant::detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using DI = hn::RebindToSigned<DF>;
using DU = hn::RebindToUnsigned<DF>;
using VF = hn::Vec<DF>;
using VI = hn::Vec<DI>;

constexpr std::size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// ---------------------------------------------------------------- rounding

// A constant vector the compiler cannot rematerialize. Made with a plain Set
// inside the kernels' loops, GCC rebuilt each constant as mov + vmovd +
// vpbroadcastd at every use once the loop ran out of registers (44 of them in
// E4m3Blocks); hidden behind an empty asm it keeps the value in a register or
// reloads it from the stack, one folded load. That bought 16% on AVX2; on AVX3
// (32 registers) it changes nothing measurable (docs/BENCHMARKS.md, "Schemes").
template <class D, class T>
HWY_INLINE hn::Vec<D> Opaque(D d, T k) {
  auto v = hn::Set(d, static_cast<hn::TFromD<D>>(k));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  asm("" : "+v"(v.raw));  // zmm
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_SSSE3
  asm("" : "+x"(v.raw));  // xmm/ymm
#endif
  return v;
}
template <std::int32_t K>
HWY_INLINE VI Ci() {
  return Opaque(DI(), K);
}
template <std::uint32_t K>
HWY_INLINE hn::Vec<DU> Cu() {
  return Opaque(DU(), K);
}

// RNE of finite f32 to bf16, returned as f32.
HWY_INLINE VF RoundBf16(VF v) {
  const DU du;
  const auto u = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(u), Cu<1u>());
  const auto r = hn::And(hn::Add(hn::Add(u, Cu<0x7FFFu>()), lsb), Cu<0xFFFF0000u>());
  return hn::BitCast(DF(), r);
}

HWY_INLINE VI SignBits(VI u) { return hn::And(u, Ci<static_cast<std::int32_t>(0x80000000u)>()); }

// E2M1: code (0..15) and signed value. NaN/Inf/|v| > 6 saturate to ±6 with
// the sign bit, like f32_to_e2m1_ref.
HWY_INLINE VI E2m1(VF v, VF& val) {
  const DI di;
  const DF df;
  const VI u = hn::BitCast(di, v);
  const VI mag = hn::Min(hn::And(u, Ci<0x7FFFFFFF>()), Ci<0x40C00000>());
  const VI odd = hn::And(hn::ShiftRight<22>(mag), Ci<1>());
  const VI nrm = hn::And(hn::Add(hn::Add(mag, Ci<0x1FFFFF>()), odd), Ci<~0x3FFFFF>());
  const VF magic = hn::BitCast(df, Ci<0x4A800000>());  // 2^22: ulp 0.5, the subnormal quantum
  const VF sub = hn::Sub(hn::Add(hn::BitCast(df, mag), magic), magic);
  const VI r = hn::IfThenElse(hn::Lt(mag, Ci<0x3F800000>()), hn::BitCast(di, sub), nrm);
  const VI sign = SignBits(u);
  val = hn::BitCast(df, hn::Or(r, sign));
  // Exponent field pairs (0.5 -> 252, 1 -> 254, 1.5 -> 255, ..., 6 -> 259)
  // map to codes by subtracting 252, except 0.5 (code 1) and 0 (code 0).
  const VI e = hn::ShiftRight<22>(r);
  const VI code = hn::Max(hn::Sub(e, Ci<252>()), hn::Min(e, Ci<1>()));
  return hn::Or(code, hn::BitCast(di, hn::ShiftRight<28>(hn::BitCast(DU(), sign))));
}

// E4M3FN saturating at ±448 (finite or infinite v; not NaN).
HWY_INLINE VI E4m3(VF v, VF& val) {
  const DI di;
  const DF df;
  const VI u = hn::BitCast(di, v);
  const VI mag = hn::Min(hn::And(u, Ci<0x7FFFFFFF>()), Ci<0x43E00000>());
  const VI odd = hn::And(hn::ShiftRight<20>(mag), Ci<1>());
  const VI nrm = hn::And(hn::Add(hn::Add(mag, Ci<0x7FFFF>()), odd), Ci<~0xFFFFF>());
  const VF magic = hn::BitCast(df, Ci<0x46800000>());  // 2^14: ulp 2^-9, the subnormal quantum
  const VF t = hn::Add(hn::BitCast(df, mag), magic);
  const auto is_sub = hn::Lt(mag, Ci<0x3C800000>());  // below 2^-6
  const VI r = hn::IfThenElse(is_sub, hn::BitCast(di, hn::Sub(t, magic)), nrm);
  const VI code = hn::IfThenElse(is_sub, hn::Sub(hn::BitCast(di, t), Ci<0x46800000>()),
                                 hn::Sub(hn::ShiftRight<20>(nrm), Ci<120 << 3>()));
  const VI sign = SignBits(u);
  val = hn::BitCast(df, hn::Or(r, sign));
  return hn::Or(code, hn::BitCast(di, hn::ShiftRight<24>(hn::BitCast(DU(), sign))));
}

}  // namespace HWY_NAMESPACE
}  // namespace selq::quant::detail
HWY_AFTER_NAMESPACE();

#endif  // SELQ_QUANT_GRID_SIMD_INL_H_
