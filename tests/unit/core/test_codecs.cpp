// Scalar reference codecs: docs/FORMAT_RULES.md §7 vectors plus exhaustive properties
// (round trips over every code, monotonicity, ties to even, saturation).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/codecs.h"

namespace selq {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---------------------------------------------------------------- §7 vectors

TEST(CodecsRef, E2m1VectorsFromFormatsDoc) {
  const float in[] = {0.25f, 0.3f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.01f, 7.0f, -0.75f, -6.5f};
  const std::uint8_t want[] = {0x0, 0x1, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x7, 0x7, 0xA, 0xF};
  for (std::size_t i = 0; i < std::size(in); ++i)
    EXPECT_EQ(f32_to_e2m1_ref(in[i]), want[i]) << "input " << in[i];
}

TEST(CodecsRef, E4m3VectorsFromFormatsDoc) {
  // The doc's bytes are the non-saturating (ml_dtypes) cast.
  const float in[] = {1.0f, -2.0f, 448.0f, 464.0f, 464.5f, 480.0f,
                      std::ldexp(1.0f, -9), std::ldexp(1.0f, -10), 1.5f * std::ldexp(1.0f, -10),
                      std::ldexp(1.0f, -6)};
  const std::uint8_t want[] = {0x38, 0xC0, 0x7E, 0x7E, 0x7F, 0x7F, 0x01, 0x00, 0x01, 0x08};
  for (std::size_t i = 0; i < std::size(in); ++i) {
    EXPECT_EQ(f32_to_e4m3_nonsat_ref(in[i]), want[i]) << "input " << in[i];
    // Saturating differs only where the non-saturating cast gave NaN.
    const std::uint8_t sat = want[i] == 0x7F ? 0x7E : want[i];
    EXPECT_EQ(f32_to_e4m3_sat_ref(in[i]), sat) << "input " << in[i];
  }
}

TEST(CodecsRef, E8m0VectorsFromFormatsDoc) {
  EXPECT_EQ(f32_to_e8m0_rne_ref(1.0f), 0x7F);
  EXPECT_EQ(f32_to_e8m0_rne_ref(1.49f), 0x7F);
  EXPECT_EQ(f32_to_e8m0_rne_ref(1.5f), 0x80);
  EXPECT_EQ(f32_to_e8m0_rne_ref(3.0f), 0x81);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::ldexp(1.0f, -127)), 0x00);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::ldexp(1.0f, 127)), 0xFE);
  EXPECT_EQ(f32_to_e8m0_rne_ref(kNaN), 0xFF);
  EXPECT_EQ(f32_to_e8m0_rne_ref(kInf), 0xFF);
}

TEST(CodecsRef, E8m0CastEdges) {
  // Subnormals: the kept bit is the implicit 0, so exactly 2^-127 stays and
  // anything above rounds up (matches torch and ml_dtypes; crosscheck proves it).
  EXPECT_EQ(f32_to_e8m0_rne_ref(1.25f * std::ldexp(1.0f, -127)), 0x01);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::nextafter(std::ldexp(1.0f, -127), 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::ldexp(1.0f, -128)), 0x00);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::ldexp(1.0f, -126)), 0x01);
  // Rounding past 2^127 has nowhere to go.
  EXPECT_EQ(f32_to_e8m0_rne_ref(1.5f * std::ldexp(1.0f, 127)), 0xFF);
  EXPECT_EQ(f32_to_e8m0_rne_ref(std::nextafter(1.5f, 0.0f) * std::ldexp(1.0f, 127)), 0xFE);
  EXPECT_EQ(f32_to_e8m0_rne_ref(0.0f), 0xFF);
  EXPECT_EQ(f32_to_e8m0_rne_ref(-0.0f), 0xFF);
  EXPECT_EQ(f32_to_e8m0_rne_ref(-1.0f), 0xFF);
  EXPECT_EQ(f32_to_e8m0_rne_ref(-kInf), 0xFF);
  // Every exponent: 2^k, just under 1.5 * 2^k, and the 1.5 tie.
  for (int k = -126; k <= 126; ++k) {
    const float p = std::ldexp(1.0f, k);
    EXPECT_EQ(f32_to_e8m0_rne_ref(p), k + 127);
    EXPECT_EQ(f32_to_e8m0_rne_ref(std::nextafter(1.5f, 0.0f) * p), k + 127);
    EXPECT_EQ(f32_to_e8m0_rne_ref(1.5f * p), k + 128);
  }
}

TEST(CodecsRef, E8m0DecodeRoundTrips) {
  for (int b = 0; b < 255; ++b) {
    const float f = e8m0_to_f32(static_cast<std::uint8_t>(b));
    EXPECT_EQ(f, std::ldexp(1.0f, b - 127));
    EXPECT_EQ(f32_to_e8m0_rne_ref(f), b);
  }
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

// ---------------------------------------------------------------- round trips

TEST(CodecsRef, Bf16AndF16RoundTripEveryCode) {
  for (std::uint32_t c = 0; c < 0x10000; ++c) {
    const auto b = static_cast<std::uint16_t>(c);
    const float fb = bf16_to_f32(b);
    if (std::isnan(fb)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16_ref(fb))));
      EXPECT_EQ(f32_to_bf16_ref(fb) & 0x8000, b & 0x8000);
    } else {
      EXPECT_EQ(f32_to_bf16_ref(fb), b);
    }
    const float fh = f16_to_f32(b);
    if (std::isnan(fh))
      EXPECT_EQ(f32_to_f16_ref(fh), (b & 0x8000) | 0x7E00);
    else
      EXPECT_EQ(f32_to_f16_ref(fh), b);
  }
}

TEST(CodecsRef, F16MatchesHardwareConversion) {
  // _Float16 conversion is IEEE RNE; use it as an independent oracle.
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (std::isnan(f)) continue;
    const auto h = std::bit_cast<std::uint16_t>(static_cast<_Float16>(f));
    ASSERT_EQ(f32_to_f16_ref(f), h) << std::hexfloat << f;
  }
}

TEST(CodecsRef, Fp8RoundTripEveryCode) {
  for (int c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    const float f4 = e4m3_to_f32(b);
    if ((b & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(f4));
    } else {
      EXPECT_EQ(f32_to_e4m3_sat_ref(f4), b) << c;
      EXPECT_EQ(f32_to_e4m3_nonsat_ref(f4), b) << c;
    }
    const float f5 = e5m2_to_f32(b);
    if ((b & 0x7F) > 0x7C) {
      EXPECT_TRUE(std::isnan(f5));
    } else if ((b & 0x7F) == 0x7C) {
      EXPECT_TRUE(std::isinf(f5));
      EXPECT_EQ(f32_to_e5m2_nonsat_ref(f5), b);
      EXPECT_EQ(f32_to_e5m2_sat_ref(f5), b - 1);  // ±Inf saturates to ±57344
    } else {
      EXPECT_EQ(f32_to_e5m2_sat_ref(f5), b) << c;
      EXPECT_EQ(f32_to_e5m2_nonsat_ref(f5), b) << c;
    }
  }
}

TEST(CodecsRef, E2m1RoundTripEveryCode) {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (int c = 0; c < 16; ++c) {
    const float f = e2m1_to_f32(static_cast<std::uint8_t>(c));
    EXPECT_EQ(f, (c & 8) ? -values[c & 7] : values[c & 7]);
    EXPECT_EQ(std::signbit(f), (c & 8) != 0);
    EXPECT_EQ(f32_to_e2m1_ref(f), c);
  }
}

// ---------------------------------------------------------------- ties, order

struct Fmt {
  const char* name;
  float (*decode)(std::uint8_t);
  std::uint8_t (*encode)(float);
  int positive_codes;  // codes 0..positive_codes-1 are the finite non-negatives
  std::uint8_t sign;
};
const Fmt kFmts[] = {
    {"e4m3_sat", e4m3_to_f32, f32_to_e4m3_sat_ref, 0x7F, 0x80},
    {"e4m3_nonsat", e4m3_to_f32, f32_to_e4m3_nonsat_ref, 0x7F, 0x80},
    {"e5m2_sat", e5m2_to_f32, f32_to_e5m2_sat_ref, 0x7C, 0x80},
    {"e5m2_nonsat", e5m2_to_f32, f32_to_e5m2_nonsat_ref, 0x7C, 0x80},
    {"e2m1", e2m1_to_f32, f32_to_e2m1_ref, 8, 0x8},
};

TEST(CodecsRef, TiesGoToEvenCodeAndNeighboursRoundToNearest) {
  for (const Fmt& fmt : kFmts) {
    for (int k = 0; k + 1 < fmt.positive_codes; ++k) {
      const float lo = fmt.decode(static_cast<std::uint8_t>(k));
      const float hi = fmt.decode(static_cast<std::uint8_t>(k + 1));
      const float mid = lo + (hi - lo) / 2;  // exact: a few bits wider than the format
      ASSERT_GT(mid, lo);
      ASSERT_LT(mid, hi);
      const int even = (k % 2 == 0) ? k : k + 1;
      for (float s : {1.0f, -1.0f}) {
        const std::uint8_t sgn = s < 0 ? fmt.sign : 0;
        EXPECT_EQ(fmt.encode(s * mid), even | sgn) << fmt.name << " tie " << mid;
        EXPECT_EQ(fmt.encode(s * std::nextafter(mid, 0.0f)), k | sgn) << fmt.name << " " << mid;
        EXPECT_EQ(fmt.encode(s * std::nextafter(mid, kInf)), (k + 1) | sgn)
            << fmt.name << " " << mid;
      }
    }
  }
}

TEST(CodecsRef, MonotoneAndSignSymmetricOverEveryBf16) {
  for (const Fmt& fmt : kFmts) {
    float prev_dec = -1.0f;
    // Positive BF16 patterns ascend with their values.
    for (std::uint32_t b = 0; b < 0x7F80; ++b) {
      const float f = bf16_to_f32(static_cast<std::uint16_t>(b));
      const std::uint8_t c = fmt.encode(f);
      EXPECT_EQ(fmt.encode(-f), c | fmt.sign) << fmt.name;
      const float dec = fmt.decode(c);
      if (std::isnan(dec) || std::isinf(dec)) {
        prev_dec = kInf;  // overflowed; everything above must overflow too
        continue;
      }
      ASSERT_GE(dec, prev_dec) << fmt.name << " at " << f;
      prev_dec = dec;
    }
  }
}

TEST(CodecsRef, SaturationAndOverflow) {
  EXPECT_EQ(f32_to_e4m3_sat_ref(1e30f), 0x7E);
  EXPECT_EQ(f32_to_e4m3_sat_ref(-kInf), 0xFE);
  EXPECT_EQ(f32_to_e4m3_sat_ref(kNaN), 0x7F);
  EXPECT_EQ(f32_to_e4m3_sat_ref(-kNaN), 0xFF);
  EXPECT_EQ(f32_to_e4m3_nonsat_ref(kInf), 0x7F);
  EXPECT_EQ(f32_to_e4m3_nonsat_ref(-kInf), 0xFF);
  EXPECT_EQ(f32_to_e4m3_nonsat_ref(std::nextafter(464.0f, 0.0f)), 0x7E);
  EXPECT_EQ(f32_to_e4m3_nonsat_ref(std::nextafter(464.0f, kInf)), 0x7F);
  // E5M2: 61440 is the tie between 57344 (odd mantissa) and 65536 = Inf.
  EXPECT_EQ(f32_to_e5m2_nonsat_ref(61440.0f), 0x7C);
  EXPECT_EQ(f32_to_e5m2_nonsat_ref(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(f32_to_e5m2_sat_ref(61440.0f), 0x7B);
  EXPECT_EQ(f32_to_e5m2_sat_ref(-kInf), 0xFB);
  EXPECT_EQ(f32_to_e5m2_nonsat_ref(-kInf), 0xFC);
  EXPECT_EQ(f32_to_e2m1_ref(kInf), 0x7);
  EXPECT_EQ(f32_to_e2m1_ref(-kInf), 0xF);
  EXPECT_EQ(f32_to_e2m1_ref(kNaN), 0x7);
  EXPECT_EQ(f32_to_e2m1_ref(-kNaN), 0xF);
  EXPECT_EQ(f32_to_bf16_ref(kNaN) & 0x7FC0, 0x7FC0);
  EXPECT_EQ(f32_to_bf16_ref(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // sNaN stays NaN
  EXPECT_EQ(f32_to_bf16_ref(std::numeric_limits<float>::max()), 0x7F80);  // rounds to Inf
  // Underflow keeps the sign: -tiny -> -0.
  EXPECT_EQ(f32_to_e4m3_sat_ref(-1e-30f), 0x80);
  EXPECT_EQ(f32_to_e2m1_ref(-0.25f), 0x8);
}

// ---------------------------------------------------------------- E8M0 scales

TEST(CodecsRef, ScaleRulesMatchFormatsDocTable) {
  struct Row {
    float amax;
    std::uint8_t floor_, ceil_, even_, rceil_;
    float elem_floor, elem_ceil, elem_even, elem_rceil;
  };
  const Row rows[] = {
      {5.0f, 0x7F, 0x80, 0x7F, 0x7F, 4, 4, 4, 4},
      {6.5f, 0x7F, 0x80, 0x7F, 0x80, 6, 6, 6, 6},
      {7.0f, 0x7F, 0x80, 0x80, 0x80, 6, 8, 8, 8},
  };
  for (const Row& r : rows) {
    const ScaleRule rules[] = {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even, ScaleRule::RCeil};
    const std::uint8_t want[] = {r.floor_, r.ceil_, r.even_, r.rceil_};
    const float elem[] = {r.elem_floor, r.elem_ceil, r.elem_even, r.elem_rceil};
    for (int i = 0; i < 4; ++i) {
      const std::uint8_t s = e8m0_scale_from_amax_ref(r.amax, rules[i], 2, 1, 6.0f);
      EXPECT_EQ(s, want[i]) << r.amax << " rule " << i;
      // The dequantised largest element, as in the doc's "0x7F->4" cells.
      const float x = e8m0_to_f32(s);
      EXPECT_EQ(e2m1_to_f32(f32_to_e2m1_ref(r.amax / x)) * x, elem[i]) << r.amax << " rule " << i;
    }
  }
}

TEST(CodecsRef, ScaleRuleEdges) {
  for (ScaleRule rule : {ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even, ScaleRule::RCeil}) {
    EXPECT_EQ(e8m0_scale_from_amax_ref(0.0f, rule, 2, 1, 6.0f), 0x00);
    EXPECT_EQ(e8m0_scale_from_amax_ref(kNaN, rule, 2, 1, 6.0f), 0xFF);
    EXPECT_EQ(e8m0_scale_from_amax_ref(kInf, rule, 8, 3, 448.0f), 0xFF);
    EXPECT_EQ(e8m0_scale_from_amax_ref(std::numeric_limits<float>::denorm_min(), rule, 2, 1, 6.0f),
              0x00);
    // Largest finite amax: still a finite scale.
    EXPECT_LT(e8m0_scale_from_amax_ref(std::numeric_limits<float>::max(), rule, 2, 1, 6.0f), 0xFF);
  }
  // RCEIL with a subnormal quotient above 2^-127 rounds up to 2^-126.
  const float amax = 1.25f * std::ldexp(1.0f, -127) * 6.0f;
  EXPECT_EQ(e8m0_scale_from_amax_ref(amax, ScaleRule::RCeil, 2, 1, 6.0f), 0x01);
  EXPECT_EQ(e8m0_scale_from_amax_ref(std::ldexp(1.0f, -127) * 4.0f, ScaleRule::RCeil, 2, 1, 4.0f),
            0x00);
}

TEST(CodecsRef, ScaleRuleProperties) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-100, 100);
  struct Elem {
    int emax, mbits;
    float max;
  };
  const Elem elems[] = {{2, 1, 6.0f}, {8, 3, 448.0f}};
  for (const Elem& e : elems) {
    for (int i = 0; i < 20000; ++i) {
      const float amax = std::ldexp(mant(rng), ex(rng));
      const int fl = e8m0_scale_from_amax_ref(amax, ScaleRule::Floor, e.emax, e.mbits, e.max);
      const int ce = e8m0_scale_from_amax_ref(amax, ScaleRule::Ceil, e.emax, e.mbits, e.max);
      const int ev = e8m0_scale_from_amax_ref(amax, ScaleRule::Even, e.emax, e.mbits, e.max);
      const int rc = e8m0_scale_from_amax_ref(amax, ScaleRule::RCeil, e.emax, e.mbits, e.max);
      // FLOOR puts amax/X in [2^emax, 2^(emax+1)).
      const float q = amax / e8m0_to_f32(static_cast<std::uint8_t>(fl));
      ASSERT_GE(q, std::ldexp(1.0f, e.emax));
      ASSERT_LT(q, std::ldexp(1.0f, e.emax + 1));
      ASSERT_TRUE(ce == fl || ce == fl + 1);
      ASSERT_TRUE(ev == fl || ev == fl + 1);
      // RCEIL never clips and is the smallest scale that does not.
      ASSERT_LE(amax / e8m0_to_f32(static_cast<std::uint8_t>(rc)), e.max) << amax;
      ASSERT_GT(amax / e8m0_to_f32(static_cast<std::uint8_t>(rc - 1)), e.max) << amax;
      // EVEN clips only when amax's significand lies between the element's
      // largest significand and the rounding point 2 - 2^-(mbits+1), e.g.
      // (1.5, 1.75) for E2M1 and (1.75, 1.9375) for E4M3.
      const float xe = e8m0_to_f32(static_cast<std::uint8_t>(ev));
      const float top_sig = e.max / std::ldexp(1.0f, e.emax);
      int ex2;
      const float sig = 2 * std::frexp(amax, &ex2);
      const bool clips = amax / xe > e.max;
      ASSERT_EQ(clips, sig > top_sig && sig < 2 - std::ldexp(1.0f, -e.mbits - 1)) << amax;
    }
  }
}

}  // namespace
}  // namespace selq
