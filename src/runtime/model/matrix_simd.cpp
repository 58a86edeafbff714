// Row dot products of the runtime's matvec and matmul_rowwise, compiled once per Highway target
// (foreach_target.h re-includes this file) and picked at run time, as
// core/codecs_simd.cpp does. Decode is bound by reading the weights, so the
// kernel streams each row once: four F32 accumulators (enough loads in flight
// to cover the FMA latency), BF16 widened to F32 by a 16-bit shift, which is
// exact. The summation order depends only on `cols` and the target.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/model/matrix.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "runtime/model/matrix_simd.cpp"
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

// Four dots of one weight row with four activation rows (ldx apart), each
// summed exactly as DotRow sums it (the same accumulators, reduction and
// tail), the weight vectors loaded and widened once for all four.
template <typename W>
HWY_INLINE void DotRow4(const W* w, const float* x, std::int64_t ldx, std::int64_t cols, float* y,
                        std::int64_t ldy) {
  const DF d;
  const std::int64_t n = static_cast<std::int64_t>(hn::Lanes(d));
  const float *x0 = x, *x1 = x + ldx, *x2 = x + 2 * ldx, *x3 = x + 3 * ldx;
  auto a00 = hn::Zero(d), a01 = hn::Zero(d), a02 = hn::Zero(d), a03 = hn::Zero(d);
  auto a10 = hn::Zero(d), a11 = hn::Zero(d), a12 = hn::Zero(d), a13 = hn::Zero(d);
  auto a20 = hn::Zero(d), a21 = hn::Zero(d), a22 = hn::Zero(d), a23 = hn::Zero(d);
  auto a30 = hn::Zero(d), a31 = hn::Zero(d), a32 = hn::Zero(d), a33 = hn::Zero(d);
  std::int64_t c = 0;
  for (; c + 4 * n <= cols; c += 4 * n) {
    const auto w0 = LoadW(w + c), w1 = LoadW(w + c + n), w2 = LoadW(w + c + 2 * n), w3 = LoadW(w + c + 3 * n);
    // One activation row's four accumulators, as DotRow's loop updates them.
    const auto fma4 = [&](const float* xt, hn::Vec<DF>& s0, hn::Vec<DF>& s1, hn::Vec<DF>& s2, hn::Vec<DF>& s3) {
      s0 = hn::MulAdd(w0, hn::LoadU(d, xt + c), s0);
      s1 = hn::MulAdd(w1, hn::LoadU(d, xt + c + n), s1);
      s2 = hn::MulAdd(w2, hn::LoadU(d, xt + c + 2 * n), s2);
      s3 = hn::MulAdd(w3, hn::LoadU(d, xt + c + 3 * n), s3);
    };
    fma4(x0, a00, a01, a02, a03);
    fma4(x1, a10, a11, a12, a13);
    fma4(x2, a20, a21, a22, a23);
    fma4(x3, a30, a31, a32, a33);
  }
  for (; c + n <= cols; c += n) {
    const auto wv = LoadW(w + c);
    a00 = hn::MulAdd(wv, hn::LoadU(d, x0 + c), a00);
    a10 = hn::MulAdd(wv, hn::LoadU(d, x1 + c), a10);
    a20 = hn::MulAdd(wv, hn::LoadU(d, x2 + c), a20);
    a30 = hn::MulAdd(wv, hn::LoadU(d, x3 + c), a30);
  }
  const auto finish = [&](const float* xt, hn::Vec<DF> s0, hn::Vec<DF> s1, hn::Vec<DF> s2, hn::Vec<DF> s3) {
    float s = hn::GetLane(hn::SumOfLanes(d, hn::Add(hn::Add(s0, s1), hn::Add(s2, s3))));
    for (std::int64_t k = c; k < cols; ++k) s += ScalarW(w[k]) * xt[k];
    return s;
  };
  y[0] = finish(x0, a00, a01, a02, a03);
  y[ldy] = finish(x1, a10, a11, a12, a13);
  y[2 * ldy] = finish(x2, a20, a21, a22, a23);
  y[3 * ldy] = finish(x3, a30, a31, a32, a33);
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
template <typename W>
void DotRow4(const W* w, const float* x, std::int64_t ldx, std::int64_t cols, float* y, std::int64_t ldy) {
  for (int t = 0; t < 4; ++t) y[t * ldy] = DotRow(w, x + t * ldx, cols);
}
#endif  // HWY_TARGET != HWY_SCALAR

}  // namespace

// Weight rows [r0, r1) against m activation rows, every element summed as
// DotRow sums it (matvec's bits), four activation rows at a time. The
// activations go in tiles of about 16 KiB, which stay in L1 while the task's
// weight rows (matvec_grain: ~64 KiB, in L2) pass over them (a 64 KiB tile
// measured 12% slower). y is row-major [m, ldy].
template <typename W>
void DotRowsMulti(const W* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols, const float* x,
                  std::int64_t m, std::int64_t ldy, float* y) {
  const std::int64_t tile = std::max<std::int64_t>(4, 4096 / std::max<std::int64_t>(cols, 1));
  for (std::int64_t t0 = 0; t0 < m; t0 += tile) {
    const std::int64_t t1 = std::min(m, t0 + tile);
    for (std::int64_t r = r0; r < r1; ++r) {
      std::int64_t t = t0;
      for (; t + 4 <= t1; t += 4) DotRow4(w + r * ld, x + t * cols, cols, cols, y + t * ldy + r, ldy);
      for (; t < t1; ++t) y[t * ldy + r] = DotRow(w + r * ld, x + t * cols, cols);
    }
  }
}
void DotRowsMultiBf16(const std::uint16_t* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                      const float* x, std::int64_t m, std::int64_t ldy, float* y) {
  DotRowsMulti(w, ld, r0, r1, cols, x, m, ldy, y);
}
void DotRowsMultiF32(const float* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                     const float* x, std::int64_t m, std::int64_t ldy, float* y) {
  DotRowsMulti(w, ld, r0, r1, cols, x, m, ldy, y);
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace selq::runtime
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace selq::runtime {

HWY_EXPORT(DotRowsMultiBf16);
HWY_EXPORT(DotRowsMultiF32);
HWY_EXPORT(TargetName);

void dot_rows_multi_bf16(const std::uint16_t* w, std::int64_t ld, std::int64_t r0, std::int64_t r1,
                         std::int64_t cols, const float* x, std::int64_t m, std::int64_t ldy, float* y) {
  HWY_DYNAMIC_DISPATCH(DotRowsMultiBf16)(w, ld, r0, r1, cols, x, m, ldy, y);
}
void dot_rows_multi_f32(const float* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                        const float* x, std::int64_t m, std::int64_t ldy, float* y) {
  HWY_DYNAMIC_DISPATCH(DotRowsMultiF32)(w, ld, r0, r1, cols, x, m, ldy, y);
}
const char* matrix_simd_target() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

}  // namespace selq::runtime
#endif  // HWY_ONCE
