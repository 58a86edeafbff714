// Row dot products of the runtime's matvec, compiled once per Highway target
// (foreach_target.h re-includes this file) and picked at run time, as
// core/codecs_simd.cpp does. Decode is bound by reading the weights, so the
// kernel streams each row once: four F32 accumulators (enough loads in flight
// to cover the FMA latency), BF16 widened to F32 by a 16-bit shift, which is
// exact. The summation order depends only on `cols` and the target.
#include <cstdint>
#include <cstring>

#include "runtime/matrix.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/matrix_simd.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace selq::runtime {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

namespace {

inline float bf16_bits_to_f32(std::uint16_t b) {
  const std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#if HWY_TARGET != HWY_SCALAR
using DF = hn::ScalableTag<float>;
using DU = hn::RebindToUnsigned<DF>;
using D16 = hn::Rebind<std::uint16_t, DU>;  // one u16 per f32 lane

HWY_INLINE hn::Vec<DF> LoadBf16(const std::uint16_t* p) {
  return hn::BitCast(DF(), hn::ShiftLeft<16>(hn::PromoteTo(DU(), hn::LoadU(D16(), p))));
}
HWY_INLINE hn::Vec<DF> LoadW(const float* p) { return hn::LoadU(DF(), p); }
HWY_INLINE hn::Vec<DF> LoadW(const std::uint16_t* p) { return LoadBf16(p); }
inline float ScalarW(float v) { return v; }
inline float ScalarW(std::uint16_t v) { return bf16_bits_to_f32(v); }

template <typename W>
HWY_INLINE float DotRow(const W* w, const float* x, std::int64_t cols) {
  const DF d;
  const std::int64_t n = static_cast<std::int64_t>(hn::Lanes(d));
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  std::int64_t c = 0;
  for (; c + 4 * n <= cols; c += 4 * n) {
    a0 = hn::MulAdd(LoadW(w + c), hn::LoadU(d, x + c), a0);
    a1 = hn::MulAdd(LoadW(w + c + n), hn::LoadU(d, x + c + n), a1);
    a2 = hn::MulAdd(LoadW(w + c + 2 * n), hn::LoadU(d, x + c + 2 * n), a2);
    a3 = hn::MulAdd(LoadW(w + c + 3 * n), hn::LoadU(d, x + c + 3 * n), a3);
  }
  for (; c + n <= cols; c += n) a0 = hn::MulAdd(LoadW(w + c), hn::LoadU(d, x + c), a0);
  float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(a0, a1), hn::Add(a2, a3))));
  for (; c < cols; ++c) s += ScalarW(w[c]) * x[c];
  return s;
}
#else   // HWY_TARGET == HWY_SCALAR
inline float ScalarW(float v) { return v; }
inline float ScalarW(std::uint16_t v) { return bf16_bits_to_f32(v); }
template <typename W>
float DotRow(const W* w, const float* x, std::int64_t cols) {
  float s = 0;
  for (std::int64_t c = 0; c < cols; ++c) s += ScalarW(w[c]) * x[c];
  return s;
}
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace

void DotRowsBf16(const std::uint16_t* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                 const float* x, float* y) {
  for (std::int64_t r = r0; r < r1; ++r) y[r] = DotRow(w + r * ld, x, cols);
}
void DotRowsF32(const float* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                const float* x, float* y) {
  for (std::int64_t r = r0; r < r1; ++r) y[r] = DotRow(w + r * ld, x, cols);
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace selq::runtime
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq::runtime {

HWY_EXPORT(DotRowsBf16);
HWY_EXPORT(DotRowsF32);
HWY_EXPORT(TargetName);

void dot_rows_bf16(const std::uint16_t* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                   const float* x, float* y) {
  HWY_DYNAMIC_DISPATCH(DotRowsBf16)(w, ld, r0, r1, cols, x, y);
}
void dot_rows_f32(const float* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                  const float* x, float* y) {
  HWY_DYNAMIC_DISPATCH(DotRowsF32)(w, ld, r0, r1, cols, x, y);
}
const char* matrix_simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace selq::runtime
#endif  // HWY_ONCE
