// Bulk SIMD codecs are bit-exact with the scalar references, on every Highway
// target this CPU can run (not just the one dispatch would pick), for all
// BF16 inputs, random F32 bit patterns, exact ties and every tail length.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <hwy/targets.h>

#include "core/codecs.h"
#include "core/codecs_simd.h"

namespace selq {
namespace {

std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

// All 65,536 BF16 patterns widened to F32.
std::vector<float> AllBf16AsF32() {
  std::vector<float> v(0x10000);
  for (std::uint32_t i = 0; i < 0x10000; ++i) v[i] = bf16_to_f32(static_cast<std::uint16_t>(i));
  return v;
}

// Inputs that stress rounding: random bit patterns (NaN, Inf, subnormals
// included), a strided sweep of the whole F32 space, and for every pair of
// adjacent E4M3/E2M1/BF16 values the exact midpoint and its F32 neighbours.
std::vector<float> HardF32() {
  std::vector<float> v;
  std::mt19937 rng(1234);
  for (int i = 0; i < 300000; ++i) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
  for (std::uint64_t u = 0; u < (1ull << 32); u += 65537) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(u)));
  auto add_ties = [&](float lo, float hi) {
    const float mid = lo + (hi - lo) / 2;
    for (float s : {1.0f, -1.0f}) {
      v.push_back(s * mid);
      v.push_back(s * std::nextafter(mid, 0.0f));
      v.push_back(s * std::nextafter(mid, std::numeric_limits<float>::infinity()));
    }
  };
  for (int c = 0; c + 1 < 0x7F; ++c) add_ties(e4m3_to_f32(c), e4m3_to_f32(c + 1));
  for (int c = 0; c + 1 < 8; ++c) add_ties(e2m1_to_f32(c), e2m1_to_f32(c + 1));
  for (std::uint32_t b = 0; b + 1 < 0x7F80; b += 3) add_ties(bf16_to_f32(b), bf16_to_f32(b + 1));
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0x7F800001u),
                            std::bit_cast<float>(0xFFFFFFFFu), std::numeric_limits<float>::max(),
                            std::numeric_limits<float>::denorm_min(), 448.0f, 464.0f, 480.0f, 6.0f, 7.0f,
                            std::nextafter(448.0f, 1e9f), std::ldexp(1.0f, -6), std::ldexp(1.0f, -10)};
  v.insert(v.end(), std::begin(specials), std::end(specials));
  return v;
}

std::vector<std::uint16_t> AllBf16() {
  std::vector<std::uint16_t> v(0x10000);
  for (std::uint32_t i = 0; i < 0x10000; ++i) v[i] = static_cast<std::uint16_t>(i);
  return v;
}

// Runs the checks once per target that this CPU supports and Highway built.
class CodecsSimd : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

std::string TargetParamName(const ::testing::TestParamInfo<std::int64_t>& info) {
  return hwy::TargetName(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllTargets, CodecsSimd,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()), TargetParamName);

TEST_P(CodecsSimd, DispatchesToRequestedTarget) {
  EXPECT_STREQ(codecs_simd_target(), hwy::TargetName(GetParam()));
}

TEST_P(CodecsSimd, Bf16WideningAndNarrowing) {
  const auto b = AllBf16();
  std::vector<float> f(b.size());
  bf16_to_f32_bulk(b.data(), f.data(), b.size());
  for (std::size_t i = 0; i < b.size(); ++i) ASSERT_EQ(bits(f[i]), bits(bf16_to_f32(b[i]))) << i;
  for (const auto& in : {AllBf16AsF32(), HardF32()}) {
    std::vector<std::uint16_t> out(in.size());
    f32_to_bf16_bulk(in.data(), out.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], f32_to_bf16_ref(in[i])) << std::hex << bits(in[i]);
  }
}

TEST_P(CodecsSimd, E4m3SaturatingMatchesReference) {
  for (const auto& in : {AllBf16AsF32(), HardF32()}) {
    std::vector<std::uint8_t> out(in.size());
    f32_to_e4m3_sat_bulk(in.data(), out.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], f32_to_e4m3_sat_ref(in[i])) << std::hex << bits(in[i]);
  }
  const auto b = AllBf16();
  std::vector<std::uint8_t> out(b.size());
  bf16_to_e4m3_sat_bulk(b.data(), out.data(), b.size());
  for (std::size_t i = 0; i < b.size(); ++i)
    ASSERT_EQ(out[i], f32_to_e4m3_sat_ref(bf16_to_f32(b[i]))) << std::hex << b[i];
}

TEST_P(CodecsSimd, E2m1MatchesReferenceUnpackedAndPacked) {
  for (const auto& in : {AllBf16AsF32(), HardF32()}) {
    std::vector<std::uint8_t> codes(in.size());
    f32_to_e2m1_bulk(in.data(), codes.data(), in.size());
    for (std::size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(codes[i], f32_to_e2m1_ref(in[i])) << std::hex << bits(in[i]);
    const std::size_t n = in.size() & ~std::size_t{1};
    std::vector<std::uint8_t> packed(n / 2);
    f32_to_e2m1_packed_bulk(in.data(), packed.data(), n);
    for (std::size_t i = 0; i < n; i += 2)
      ASSERT_EQ(packed[i / 2], f32_to_e2m1_ref(in[i]) | (f32_to_e2m1_ref(in[i + 1]) << 4)) << i;
  }
  const auto b = AllBf16();
  std::vector<std::uint8_t> packed(b.size() / 2);
  bf16_to_e2m1_packed_bulk(b.data(), packed.data(), b.size());
  for (std::size_t i = 0; i < b.size(); i += 2) {
    const int want = f32_to_e2m1_ref(bf16_to_f32(b[i])) | (f32_to_e2m1_ref(bf16_to_f32(b[i + 1])) << 4);
    ASSERT_EQ(packed[i / 2], want) << std::hex << b[i];
  }
}

TEST_P(CodecsSimd, DecodersMatchReference) {
  std::vector<std::uint8_t> codes(256);
  for (int i = 0; i < 256; ++i) codes[i] = static_cast<std::uint8_t>(i);
  std::vector<float> f(256);
  e4m3_to_f32_bulk(codes.data(), f.data(), 256);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(bits(f[i]), bits(e4m3_to_f32(codes[i]))) << i;
  // Every packed byte: 512 nibbles in element order.
  std::vector<float> g(512);
  e2m1_packed_to_f32_bulk(codes.data(), g.data(), 512);
  for (int i = 0; i < 512; ++i)
    ASSERT_EQ(bits(g[i]), bits(e2m1_to_f32((codes[i / 2] >> (4 * (i & 1))) & 0xF))) << i;
}

TEST_P(CodecsSimd, ScaleIsIeeeDivision) {
  const auto in = HardF32();
  std::vector<float> out(in.size());
  const float divisors[] = {3.0f, 0.1f, 448.0f / 7, 6.0f, std::ldexp(1.0f, -130), 0.0f,
                            -std::numeric_limits<float>::infinity()};
  for (float d : divisors) {
    scale_f32_bulk(in.data(), out.data(), in.size(), d);
    for (std::size_t i = 0; i < in.size(); ++i) {
      const float want = in[i] / d;
      if (std::isnan(want))
        ASSERT_TRUE(std::isnan(out[i]));
      else
        ASSERT_EQ(bits(out[i]), bits(want)) << in[i] << " / " << d;
    }
  }
  // In place.
  std::vector<float> io = in;
  scale_f32_bulk(io.data(), io.data(), io.size(), 3.0f);
  for (std::size_t i = 0; i < in.size(); ++i)
    if (!std::isnan(io[i])) {
      ASSERT_EQ(bits(io[i]), bits(in[i] / 3.0f));
    }
}

float RefAmax(const float* p, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (std::isnan(p[i])) return p[i];
    m = std::max(m, std::fabs(p[i]));
  }
  return m;
}

TEST_P(CodecsSimd, AmaxPropagatesNaNAtEveryPosition) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (std::size_t n : {0u, 1u, 7u, 33u, 100u, 1000u}) {
    std::vector<float> f(n);
    std::vector<std::uint16_t> b(n);
    for (std::size_t i = 0; i < n; ++i) {
      f[i] = nd(rng);
      b[i] = f32_to_bf16_ref(f[i]);
    }
    EXPECT_EQ(amax_f32(f.data(), n), RefAmax(f.data(), n)) << n;
    std::vector<float> bw(n);
    for (std::size_t i = 0; i < n; ++i) bw[i] = bf16_to_f32(b[i]);
    EXPECT_EQ(amax_bf16(b.data(), n), RefAmax(bw.data(), n)) << n;
    for (std::size_t pos = 0; pos < n; pos += (n > 40 ? 13 : 1)) {
      auto f2 = f;
      auto b2 = b;
      f2[pos] = -std::numeric_limits<float>::quiet_NaN();
      b2[pos] = 0x7FC1;
      EXPECT_TRUE(std::isnan(amax_f32(f2.data(), n))) << n << " " << pos;
      EXPECT_TRUE(std::isnan(amax_bf16(b2.data(), n))) << n << " " << pos;
      f2[pos] = -std::numeric_limits<float>::infinity();
      EXPECT_EQ(amax_f32(f2.data(), n), std::numeric_limits<float>::infinity());
    }
  }
}

// Every length up to two vectors plus one, at an odd start offset, with guard
// bytes after the output that must stay untouched.
TEST_P(CodecsSimd, TailsAndUnalignedPointers) {
  // 16 f32 lanes is AVX-512; go further so wider vectors (SVE, RVV) are covered.
  const std::size_t max_lanes = 32;
  const auto pool = HardF32();
  constexpr std::uint8_t kGuard = 0xA5;
  for (std::size_t n = 0; n <= 2 * max_lanes + 1; ++n) {
    for (std::size_t start = 0; start < 3; ++start) {
      const float* in = pool.data() + 1000 * n + start;
      std::vector<std::uint16_t> in16(n + 1);
      for (std::size_t i = 0; i < n; ++i) in16[i + 1] = f32_to_bf16_ref(in[i]);
      const std::uint16_t* b = in16.data() + 1;  // 2-byte misaligned vs 4

      std::vector<std::uint8_t> o8(n + 1 + 16, kGuard);
      f32_to_e4m3_sat_bulk(in, o8.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(o8[i + 1], f32_to_e4m3_sat_ref(in[i])) << n;
      for (std::size_t i = n + 1; i < o8.size(); ++i) ASSERT_EQ(o8[i], kGuard) << n;
      ASSERT_EQ(o8[0], kGuard);

      std::fill(o8.begin(), o8.end(), kGuard);
      bf16_to_e4m3_sat_bulk(b, o8.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i)
        ASSERT_EQ(o8[i + 1], f32_to_e4m3_sat_ref(bf16_to_f32(b[i]))) << n;
      for (std::size_t i = n + 1; i < o8.size(); ++i) ASSERT_EQ(o8[i], kGuard) << n;

      std::fill(o8.begin(), o8.end(), kGuard);
      f32_to_e2m1_bulk(in, o8.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(o8[i + 1], f32_to_e2m1_ref(in[i])) << n;
      for (std::size_t i = n + 1; i < o8.size(); ++i) ASSERT_EQ(o8[i], kGuard) << n;

      // Packed: odd n leaves the last high nibble 0.
      const std::size_t nbytes = (n + 1) / 2;
      auto packed_want = [&](auto elem) {
        std::vector<std::uint8_t> w(nbytes, 0);
        for (std::size_t i = 0; i < n; ++i) w[i / 2] |= f32_to_e2m1_ref(elem(i)) << (4 * (i & 1));
        return w;
      };
      for (int src = 0; src < 2; ++src) {
        std::fill(o8.begin(), o8.end(), kGuard);
        std::vector<std::uint8_t> want;
        if (src == 0) {
          f32_to_e2m1_packed_bulk(in, o8.data() + 1, n);
          want = packed_want([&](std::size_t i) { return in[i]; });
        } else {
          bf16_to_e2m1_packed_bulk(b, o8.data() + 1, n);
          want = packed_want([&](std::size_t i) { return bf16_to_f32(b[i]); });
        }
        for (std::size_t i = 0; i < nbytes; ++i) ASSERT_EQ(o8[i + 1], want[i]) << n << " src " << src;
        for (std::size_t i = nbytes + 1; i < o8.size(); ++i) ASSERT_EQ(o8[i], kGuard) << n;

        // And back.
        std::vector<float> dec(n + 9, 7.0f);
        e2m1_packed_to_f32_bulk(o8.data() + 1, dec.data() + 1, n);
        for (std::size_t i = 0; i < n; ++i)
          ASSERT_EQ(bits(dec[i + 1]), bits(e2m1_to_f32((want[i / 2] >> (4 * (i & 1))) & 0xF))) << n;
        for (std::size_t i = n + 1; i < dec.size(); ++i) ASSERT_EQ(dec[i], 7.0f) << n;
        ASSERT_EQ(dec[0], 7.0f);
      }

      std::vector<std::uint16_t> o16(n + 9, 0xA5A5);
      f32_to_bf16_bulk(in, o16.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(o16[i + 1], f32_to_bf16_ref(in[i])) << n;
      for (std::size_t i = n + 1; i < o16.size(); ++i) ASSERT_EQ(o16[i], 0xA5A5) << n;

      std::vector<float> of(n + 9, 7.0f);
      bf16_to_f32_bulk(b, of.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(of[i + 1]), bits(bf16_to_f32(b[i]))) << n;
      for (std::size_t i = n + 1; i < of.size(); ++i) ASSERT_EQ(of[i], 7.0f) << n;

      std::fill(of.begin(), of.end(), 7.0f);
      std::vector<std::uint8_t> e4(n + 1);
      for (std::size_t i = 0; i < n; ++i) e4[i + 1] = static_cast<std::uint8_t>(i * 37 + start);
      e4m3_to_f32_bulk(e4.data() + 1, of.data() + 1, n);
      for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(bits(of[i + 1]), bits(e4m3_to_f32(e4[i + 1]))) << n;
      for (std::size_t i = n + 1; i < of.size(); ++i) ASSERT_EQ(of[i], 7.0f) << n;

      std::fill(of.begin(), of.end(), 7.0f);
      scale_f32_bulk(in, of.data() + 1, n, 3.0f);
      for (std::size_t i = 0; i < n; ++i)
        if (!std::isnan(in[i])) {
          ASSERT_EQ(bits(of[i + 1]), bits(in[i] / 3.0f)) << n;
        }
      for (std::size_t i = n + 1; i < of.size(); ++i) ASSERT_EQ(of[i], 7.0f) << n;

      const float am = amax_f32(in, n);
      const float want_am = RefAmax(in, n);
      if (std::isnan(want_am)) ASSERT_TRUE(std::isnan(am)) << n;
      else ASSERT_EQ(am, want_am) << n;
    }
  }
}

}  // namespace
}  // namespace selq
