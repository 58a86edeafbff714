// The fused SIMD row kernels (quant/kernels_simd.cpp) against the scalar row
// paths they replace: codes and scales must be identical byte for byte,
// clip counts identical, and the error sums equal up to float summation
// order. Inputs are built to hit every rounding edge: exact ties after
// scaling, subnormal quotients, zeros of both signs, saturation, and every
// finite BF16 bit pattern.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <hwy/targets.h>

#include "core/codecs.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"

using namespace selq;
using namespace selq::quant;
using namespace selq::quant::detail;

namespace {

// Rows mixing Gaussian values of random row/block magnitude with values
// sitting exactly on format midpoints (times powers of two), zeros, -0.0,
// subnormals and outliers.
std::vector<float> nasty_row(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15), ex(-20, 20);
  static const float kTies[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 7.0f, 464.0f,
                                0.0009765625f, 0.00146484375f, 0.0029296875f, 1.0625f, 6.0f, 448.0f};
  std::vector<float> x(n);
  float block_scale = 1.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 16 == 0) block_scale = std::ldexp(1.0f, ex(rng));
    const int k = pick(rng);
    float v;
    if (k < 8) v = g(rng) * block_scale;
    else if (k < 12) v = kTies[rng() % std::size(kTies)] * std::ldexp(1.0f, ex(rng) / 4);
    else if (k == 12) v = 0.0f;
    else if (k == 13) v = -0.0f;
    else if (k == 14) v = std::ldexp(g(rng), -140);  // subnormal
    else v = g(rng) * 1e4f;
    if (rng() & 1) v = -v;
    x[i] = v;
  }
  return x;
}

void expect_metrics_match(const ErrorMetrics& a, const ErrorMetrics& b, const std::string& what) {
  EXPECT_EQ(a.elements, b.elements) << what;
  EXPECT_EQ(a.clipped_elements, b.clipped_elements) << what;
  EXPECT_EQ(a.clipped_blocks, b.clipped_blocks) << what;
  EXPECT_EQ(a.blocks, b.blocks) << what;
  // Float windows may overflow to Inf on the huge BF16 values; then both must.
  const auto near = [](double p, double q) {
    return (std::isinf(q) && p == q) || std::fabs(p - q) <= 1e-5 * std::fabs(q) + 1e-30;
  };
  EXPECT_TRUE(near(a.sum_sq_ref, b.sum_sq_ref)) << what << " " << a.sum_sq_ref << " " << b.sum_sq_ref;
  EXPECT_TRUE(near(a.sum_sq_err, b.sum_sq_err)) << what << " " << a.sum_sq_err << " " << b.sum_sq_err;
  EXPECT_TRUE(near(a.sum_dot, b.sum_dot)) << what << " " << a.sum_dot << " " << b.sum_dot;
  EXPECT_TRUE(near(a.sum_sq_dq, b.sum_sq_dq)) << what;
  // x - dq may be fused into one FMA by the compiler: equal up to rounding.
  EXPECT_TRUE(near(a.max_abs_err, b.max_abs_err)) << what << " " << a.max_abs_err << " " << b.max_abs_err;
}

// Runs f once per SIMD target compiled in and supported by this CPU (the
// kernels dispatch at run time, so each target needs its own check).
template <class F>
void for_each_target(F&& f) {
  for (std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Every finite BF16 bit pattern, in an order that puts many magnitudes into
// each block.
std::vector<float> all_finite_bf16() {
  std::vector<float> v;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<std::uint16_t>((h * 40503u) & 0xFFFFu));
    if (std::isfinite(f)) v.push_back(f);
  }
  v.resize(v.size() / 32 * 32);
  return v;
}

}  // namespace

TEST(KernelsSimd, MxRowsMatchScalarForEveryRule) { for_each_target([] {
  for (bool fp4 : {true, false}) {
    for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even, ScaleRule::RCeil}) {
      SchemeSpec spec;
      spec.kind = fp4 ? SchemeKind::MXFP4 : SchemeKind::MXFP8;
      spec.scale_rule = rule;
      for (unsigned seed = 0; seed < 6; ++seed) {
        const auto x = seed == 0 ? all_finite_bf16() : nasty_row(32 * (1 + 37 * seed), seed);
        const std::int64_t in = static_cast<std::int64_t>(x.size());
        const std::size_t wbytes = fp4 ? x.size() / 2 : x.size();
        std::vector<std::uint8_t> wa(wbytes), wb(wbytes), sa(x.size() / 32), sb(x.size() / 32);
        ErrorMetrics ma, mb;
        mx_row(spec, x.data(), in, wa.data(), sa.data(), ma, true);
        mx_row(spec, x.data(), in, wb.data(), sb.data(), mb, false);
        const std::string what = spec.name() + " rule " + std::to_string(int(rule)) + " seed " + std::to_string(seed);
        EXPECT_EQ(sa, sb) << what;
        EXPECT_EQ(wa, wb) << what;
        expect_metrics_match(ma, mb, what);
      }
    }
  }
}); }

TEST(KernelsSimd, Nvfp4RowsMatchScalarInBothConventions) { for_each_target([] {
  for (bool ct : {true, false}) {
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      for (float amax : {1.0f, 1e-3f, 3e4f, 1e9f}) {
        for (unsigned seed = 0; seed < 4; ++seed) {
          const auto x = seed == 0 ? all_finite_bf16() : nasty_row(16 * (1 + 53 * seed), seed + 10);
          const std::int64_t in = static_cast<std::int64_t>(x.size());
          const Nvfp4RowParams p{
              ct, t,
              nvfp4_global_scale(ct ? NvfpConvention::CompressedTensors : NvfpConvention::ModelOpt, t, amax)};
          std::vector<std::uint8_t> wa(x.size() / 2), wb(x.size() / 2), sa(x.size() / 16), sb(x.size() / 16);
          ErrorMetrics ma, mb;
          nvfp4_row(p, x.data(), in, wa.data(), sa.data(), ma, true);
          nvfp4_row(p, x.data(), in, wb.data(), sb.data(), mb, false);
          const std::string what = std::string(ct ? "ct " : "modelopt ") + std::string(dtype_name(t)) + " amax " +
                                   std::to_string(amax) + " seed " + std::to_string(seed);
          EXPECT_EQ(sa, sb) << what;
          EXPECT_EQ(wa, wb) << what;
          // Quotients by a zero ModelOpt scale are Inf/NaN: sums may be NaN.
          if (std::isfinite(mb.sum_sq_err)) expect_metrics_match(ma, mb, what);
        }
      }
    }
  }
}); }

TEST(KernelsSimd, Fp8RowsMatchScalarForAnyLengthAndQuotientDtype) { for_each_target([] {
  for (DType ct : {DType::F32, DType::BF16, DType::F16}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{31},
                          std::size_t{257}, std::size_t{4096}}) {
      for (float s : {1.0f, 0.0078125f, 3.3e-3f, 1.7f, 0x1p-20f, 1e-30f}) {
        const auto x = nasty_row(n, static_cast<unsigned>(n) * 7 + 1);
        std::vector<std::uint8_t> wa(n), wb(n);
        ErrorMetrics ma, mb;
        fp8_row(ct, x.data(), n, s, wa.data(), ma, true);
        fp8_row(ct, x.data(), n, s, wb.data(), mb, false);
        const std::string what = std::string(dtype_name(ct)) + " n " + std::to_string(n) + " s " + std::to_string(s);
        EXPECT_EQ(wa, wb) << what;
        if (std::isfinite(mb.sum_sq_err)) expect_metrics_match(ma, mb, what);
      }
    }
  }
  // every finite BF16 value at scale 1: exercises the whole E4M3 grid
  const auto x = all_finite_bf16();
  std::vector<std::uint8_t> wa(x.size()), wb(x.size());
  ErrorMetrics ma, mb;
  fp8_row(DType::BF16, x.data(), x.size(), 1.0f, wa.data(), ma, true);
  fp8_row(DType::BF16, x.data(), x.size(), 1.0f, wb.data(), mb, false);
  EXPECT_EQ(wa, wb);
  EXPECT_EQ(ma.clipped_elements, mb.clipped_elements);
}); }

namespace {
// Groups whose scale comes out a power of two (amax 7.5 * 2^e for int4 sym,
// 127.5 * 2^e for int8 sym) holding values on .5 ties, mixed with nasty rows.
std::vector<float> int_row_input(std::size_t n, std::size_t gw, int bits, unsigned seed) {
  auto x = nasty_row(n, seed);
  std::mt19937 rng(seed * 31 + 5);
  std::uniform_int_distribution<int> ex(-12, 12), k(-8, 7);
  const float top = bits == 4 ? 7.5f : 127.5f;
  for (std::size_t g = 0; g * gw < n; ++g) {
    if (rng() % 3 != 0) continue;
    const float p2 = std::ldexp(1.0f, ex(rng));
    for (std::size_t i = 0; i < gw; ++i) x[g * gw + i] = (static_cast<float>(k(rng)) + 0.5f) * p2;
    x[g * gw] = (rng() & 1 ? -top : top) * p2;
  }
  return x;
}
}  // namespace

TEST(KernelsSimd, IntRowsMatchScalar) { for_each_target([] {
  struct Dt {
    DType t, sd;
  };
  for (int bits : {4, 8}) {
    for (bool sym : {true, false}) {
      for (Dt dt : {Dt{DType::BF16, DType::BF16}, Dt{DType::BF16, DType::F32}, Dt{DType::F32, DType::F32},
                    Dt{DType::F32, DType::BF16}, Dt{DType::F16, DType::F16}, Dt{DType::F32, DType::F16}}) {
        for (std::size_t gw : {std::size_t{0}, std::size_t{128}, std::size_t{32}, std::size_t{7}}) {
          for (unsigned seed = 0; seed < 3; ++seed) {
            const std::size_t n = gw == 0 ? 8 * (1 + 97 * seed) + seed : 128 * 7 * (seed + 1);
            const std::size_t w = gw == 0 ? n : gw;
            auto x = int_row_input(n, w, bits, seed + 100 * bits);
            if (dt.t == DType::BF16)
              for (float& v : x) v = bf16_to_f32(f32_to_bf16_ref(v));
            const IntRowParams p{bits, sym, dt.sd, dt.sd == dt.t ? dt.t : DType::F32,
                                 dt.sd == dt.t ? dt.t : DType::F32, static_cast<std::int64_t>(w),
                                 seed == 1 ? 0 : 1 << (bits - 1)};
            const std::size_t ng = n / w;
            std::vector<std::uint8_t> ca(n), cb(n);
            std::vector<float> sa(ng), sb(ng), za(ng), zb(ng);
            ErrorMetrics ma, mb;
            int_row(p, x.data(), static_cast<std::int64_t>(n), ca.data(), sa.data(), za.data(), ma, true);
            int_row(p, x.data(), static_cast<std::int64_t>(n), cb.data(), sb.data(), zb.data(), mb, false);
            const std::string what = "int" + std::to_string(bits) + (sym ? " sym " : " asym ") +
                                     std::string(dtype_name(dt.t)) + "/" + std::string(dtype_name(dt.sd)) +
                                     " gw " + std::to_string(w) + " seed " + std::to_string(seed);
            ASSERT_EQ(ca, cb) << what;
            for (std::size_t g = 0; g < ng; ++g) {
              ASSERT_EQ(std::bit_cast<std::uint32_t>(sa[g]), std::bit_cast<std::uint32_t>(sb[g])) << what;
              ASSERT_EQ(std::bit_cast<std::uint32_t>(za[g]), std::bit_cast<std::uint32_t>(zb[g])) << what;
            }
            if (std::isfinite(mb.sum_sq_err)) expect_metrics_match(ma, mb, what);
            EXPECT_GT(mb.blocks, 0u);
          }
        }
      }
    }
  }
}); }

TEST(KernelsSimd, IntRowsHitClippingAndTies) {
  // The oracle comparison above is only meaningful if the inputs reach the
  // clipped cases; int4 sym rounds +7.5 * s up to 8, which clips.
  const auto x = int_row_input(128 * 16, 128, 4, 7);
  const IntRowParams p{4, true, DType::BF16, DType::BF16, DType::BF16, 128, 8};
  std::vector<std::uint8_t> c(x.size());
  std::vector<float> s(16), z(16);
  ErrorMetrics m;
  int_row(p, x.data(), static_cast<std::int64_t>(x.size()), c.data(), s.data(), z.data(), m, true);
  EXPECT_GT(m.clipped_elements, 0u);
  EXPECT_EQ(m.blocks, 16u);
  EXPECT_EQ(m.elements, x.size());
}

TEST(KernelsSimd, FusedRowLoadAndSpanAmaxMatchTheStagedPath) { for_each_target([] {
  // load_row_block_amax / span_amax_fast replace load_row + block_amax_simd
  // / span_amax; the row values, the block maxima (bit for bit) and the span
  // amax must not change, with or without NaN/Inf, aligned or not.
  for (DType t : {DType::BF16, DType::F32, DType::F16}) {
    for (int poison : {0, 1, 2}) {  // none, Inf, NaN
      for (std::size_t shift : {std::size_t{0}, std::size_t{1}}) {
        // n % 32 == 0 for the block widths; bw = n - 5 covers a ragged
        // single block (fp8 per-channel, int rows) via the prefix below.
        const std::size_t n = 32 * 41, es = t == DType::F32 ? 4 : 2;
        auto x = nasty_row(n, 77 + poison);
        if (t == DType::F16)  // stay inside F16's range unless poisoned
          for (float& v : x) v = std::clamp(v, -6e4f, 6e4f);
        if (poison == 1) x[517] = -INFINITY;
        if (poison == 2) x[1000] = NAN;
        std::vector<std::uint8_t> bytes(n * es + shift);
        for (std::size_t i = 0; i < n; ++i) store_float(t, bytes.data() + shift, i, x[i]);
        const TensorInfo info{"w", t, Shape{static_cast<std::int64_t>(n)}};
        const TensorView view{&info, std::span<const std::uint8_t>(bytes.data() + shift, n * es)};
        const std::string what = std::string(dtype_name(t)) + " poison " + std::to_string(poison) +
                                 " shift " + std::to_string(shift);
        for (std::size_t bw : {std::size_t{16}, std::size_t{32}, n - 5}) {
          const std::size_t m = bw == n - 5 ? bw : n;  // elements loaded
          std::vector<float> staged(m), buf(m), a0(m / bw), a1(m / bw);
          load_row(t, view.bytes.data(), 0, m, staged.data());
          block_amax_simd(staged.data(), m, bw, a0.data());
          const float* row = load_row_block_amax(t, view.bytes.data(), 0, m, bw, buf.data(), a1.data());
          ASSERT_EQ(0, std::memcmp(row, staged.data(), m * 4)) << what;
          ASSERT_EQ(0, std::memcmp(a0.data(), a1.data(), a0.size() * 4)) << what << " bw " << bw;
          EXPECT_EQ(all_finite(a1.data(), a1.size()), poison == 0) << what;
        }
        const float want = span_amax(view, 3, n - 3), got = span_amax_fast(view, 3, n - 3);
        EXPECT_EQ(std::bit_cast<std::uint32_t>(want), std::bit_cast<std::uint32_t>(got)) << what;
      }
    }
  }
}); }
