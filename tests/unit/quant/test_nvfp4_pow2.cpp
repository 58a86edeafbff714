// NVFP4 with power-of-two scales (TensorQuantizeOptions::nvfp4_pow2_scales),
// which selq uses to re-quantize MXFP4 to NVFP4: values on an MXFP4 grid (an
// E2M1 value times 2^e per block of 32) come back exactly, in both NVFP4
// conventions, while the block exponents span at most E4M3's 18 binades of
// powers of two; a block below that range is not exact but finite.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "quant/scheme.h"
#include "quantize_roundtrip.h"

using namespace selq;
using namespace selq::quant;

namespace {

constexpr float kE2M1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};

// rows x in values: each block of 32 an E2M1 value (random sign) times 2^e,
// e drawn from [lo, hi] per block.
std::vector<float> mx_grid(std::int64_t rows, std::int64_t in, int lo, int hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 7), sign(0, 1), exp(lo, hi);
  std::vector<float> v(static_cast<std::size_t>(rows * in));
  for (std::size_t b = 0; b < v.size(); b += 32) {
    const int e = exp(rng);
    for (std::size_t i = b; i < b + 32; ++i) v[i] = std::ldexp(kE2M1[code(rng)], e) * (sign(rng) ? -1.0f : 1.0f);
  }
  return v;
}

test_util::Quantized roundtrip(const SchemeSpec& spec, const std::vector<float>& x, const Shape& shape, bool pow2 = true) {
  TensorQuantizeOptions opt;
  opt.nvfp4_pow2_scales = pow2;
  return test_util::quantize_roundtrip(
      spec, TensorInfo{"w", DType::F32, shape},
      std::span(reinterpret_cast<const std::uint8_t*>(x.data()), x.size() * sizeof(float)), opt);
}

}  // namespace

TEST(Nvfp4Pow2, Mxfp4GridValuesComeBackExactly) {
  for (NvfpConvention conv : {NvfpConvention::CompressedTensors, NvfpConvention::ModelOpt}) {
    const SchemeSpec spec{.kind = SchemeKind::NVFP4, .nvfp = conv};
    const auto x = mx_grid(32, 256, -20, -3, 1);  // 18 binades
    const auto dq = roundtrip(spec, x, {32, 256}).dq;
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(dq[i], x[i]) << i;
    // The plain scale rule does not keep them (the reason for the option).
    EXPECT_GT(roundtrip(spec, x, {32, 256}, false).metrics.sum_sq_err, 0.0);
  }
}

TEST(Nvfp4Pow2, BlocksBelowTheRangeAreFiniteNotExact) {
  const SchemeSpec spec{.kind = SchemeKind::NVFP4};
  auto x = mx_grid(8, 64, -4, -4, 2);
  for (std::size_t i = 0; i < 16; ++i) x[i] = std::ldexp(kE2M1[i % 8], -40);  // 36 binades below the top block
  const auto dq = roundtrip(spec, x, {8, 64}).dq;
  for (std::size_t i = 16; i < x.size(); ++i) ASSERT_EQ(dq[i], x[i]) << i;
  bool any_off = false;
  for (std::size_t i = 0; i < 16; ++i) {
    ASSERT_TRUE(std::isfinite(dq[i]));
    any_off |= dq[i] != x[i];
  }
  EXPECT_TRUE(any_off);
}
