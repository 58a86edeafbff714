// The `mse` and `weighted` searches screen their candidates with float sums
// and sum again in double only where the float sums cannot tell
// (quant/rounding_mse.cpp, screened_lane). The stored bytes must be those of
// the double sums alone: checked here for every searching kind and input
// dtype on data made to sit near the screen's limits — values on a coarse
// grid (many candidates with equal or nearly equal errors), constant and
// zero blocks, magnitudes whose squares underflow or overflow float, and
// channel weights spread over 10^8 with zeros. And the screen's bound on
// its own: on lanes whose sums are equal in exact arithmetic (the same
// terms in another order) or a few ulps apart, whatever it decides is the
// double sums' choice.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "quant/rounding_mse.h"
#include "quant/rounding_screen.h"
#include "quant/scheme.h"
#include "quantize_roundtrip.h"

using namespace selq;
using namespace selq::quant;
using test_util::to_bytes;

namespace {

enum class Data { Gaussian, Grid, ConstantAndZero, Tiny, Huge };

constexpr Data kData[] = {Data::Gaussian, Data::Grid, Data::ConstantAndZero, Data::Tiny, Data::Huge};

const char* data_name(Data d) {
  switch (d) {
    case Data::Gaussian: return "gaussian";
    case Data::Grid: return "grid";
    case Data::ConstantAndZero: return "constant-and-zero";
    case Data::Tiny: return "tiny";
    case Data::Huge: return "huge";
  }
  return "?";
}

std::vector<float> sample(Data d, std::int64_t rows, std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::uniform_int_distribution<int> small(-6, 6);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> v(static_cast<std::size_t>(rows * in));
  for (std::int64_t r = 0; r < rows; ++r) {
    const double scale = 0.02 * std::exp2(4.0 * u(rng) - 2.0);
    const float constant = static_cast<float>(n01(rng) * scale);
    for (std::int64_t c = 0; c < in; ++c) {
      double x = n01(rng) * scale;
      switch (d) {
        case Data::Gaussian: break;
        case Data::Grid: x = small(rng) * 0.25; break;                // few distinct values: near ties
        case Data::ConstantAndZero: x = (c / 16) % 3 == 0 ? 0.0 : (c / 16) % 3 == 1 ? constant : x; break;
        case Data::Tiny: x *= 1e-36; break;                           // squares underflow float
        case Data::Huge: x *= r % 2 ? 1e17 : 1e21; break;             // squares near or past float's range
      }
      v[static_cast<std::size_t>(r * in + c)] = static_cast<float>(x);
    }
  }
  return v;
}

// Channel weights over 10^8, 5% zero.
std::vector<float> channel_weights(std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> w(static_cast<std::size_t>(in));
  for (auto& x : w) x = u(rng) < 0.05 ? 0.0f : static_cast<float>(std::pow(10.0, 8.0 * u(rng) - 4.0));
  return w;
}

std::vector<std::pair<std::string, SchemeSpec>> searching_kinds() {
  return {
      {"mxfp4", {.kind = SchemeKind::MXFP4}},
      {"mxfp8", {.kind = SchemeKind::MXFP8}},
      {"nvfp4-ct", {.kind = SchemeKind::NVFP4}},
      {"nvfp4-modelopt", {.kind = SchemeKind::NVFP4, .nvfp = NvfpConvention::ModelOpt}},
      {"fp8-channel", {.kind = SchemeKind::FP8Channel}},
      {"fp8-block32", {.kind = SchemeKind::FP8Block, .block_rows = 32, .block_cols = 32}},
      {"fp8-channel-e8m0", {.kind = SchemeKind::FP8ChannelE8M0}},
      {"int4-channel", {.kind = SchemeKind::IntChannel, .bits = 4}},
      {"int8-channel", {.kind = SchemeKind::IntChannel, .bits = 8}},
      {"int4-channel-asym", {.kind = SchemeKind::IntChannel, .bits = 4, .symmetric = false}},
      {"int4-g128", {.kind = SchemeKind::IntGroup, .bits = 4, .group_size = 128}},
      {"int4-g64-asym", {.kind = SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 64}},
      {"int8-g32", {.kind = SchemeKind::IntGroup, .bits = 8, .group_size = 32}},
  };
}

// The stored buffers with the screen on or off.
std::vector<std::vector<std::uint8_t>> stored(SchemeSpec spec, const TensorInfo& info,
                                              const std::vector<std::uint8_t>& bytes, std::span<const float> weights,
                                              bool screening) {
  spec.rounding.value = weights.empty() ? Rounding::Mse : Rounding::Weighted;
  TensorQuantizeOptions o;
  o.channel_weights = weights;
  o.reject_non_finite = false;  // F16 cannot hold the Huge values: those rows keep nearest's scales
  const bool before = detail::set_mse_screening(screening);
  auto q = test_util::quantize_roundtrip(spec, info, bytes, o);
  detail::set_mse_screening(before);
  return q.bufs;
}

// Every SIMD target compiled in and supported here: the searches are
// compiled once per target, with other vector widths and tails.
std::vector<std::int64_t> targets() { return hwy::SupportedAndGeneratedTargets(); }

}  // namespace

// For every target, screened or not, the bytes of the double sums alone under
// the default target. 231 columns: rows whose length no vector width
// divides, so the per-channel and per-tensor searches take their tails.
TEST(RoundingScreen, SameBytesAsTheDoubleSumsAloneOnEveryTarget) {
  constexpr std::int64_t rows = 32;
  unsigned seed = 11;
  for (const auto& [what, spec] : searching_kinds())
    for (std::int64_t in : {256, 231}) {
      const bool grouped = spec.kind == SchemeKind::MXFP4 || spec.kind == SchemeKind::MXFP8 ||
                           spec.kind == SchemeKind::NVFP4 || spec.kind == SchemeKind::IntGroup ||
                           spec.kind == SchemeKind::FP8Block;
      if (in == 231 && grouped) continue;  // their blocks must divide the row
      for (DType dt : {DType::BF16, DType::F32, DType::F16})
        for (Data d : kData)
          for (bool weighted : {false, true}) {
            ++seed;
            SCOPED_TRACE(::testing::Message() << what << " in " << in << " " << dtype_name(dt) << " " << data_name(d)
                                              << (weighted ? " weighted" : " mse") << " seed " << seed);
            const auto bytes = to_bytes(sample(d, rows, in, seed), dt);
            const TensorInfo info{"model.layers.0.mlp.down_proj.weight", dt, Shape{rows, in}};
            const auto w = weighted ? channel_weights(in, seed) : std::vector<float>{};
            const auto want = stored(spec, info, bytes, w, false);
            for (std::int64_t target : targets()) {
              hwy::SetSupportedTargetsForTest(target);
              SCOPED_TRACE(hwy::TargetName(target));
              const auto screened = stored(spec, info, bytes, w, true), unscreened = stored(spec, info, bytes, w, false);
              hwy::SetSupportedTargetsForTest(0);
              ASSERT_EQ(screened, want);
              ASSERT_EQ(unscreened, want);
            }
          }
    }
}

// The switch is what the test above compares, so it must reach the search.
TEST(RoundingScreen, SwitchReturnsThePreviousSetting) {
  EXPECT_TRUE(detail::set_mse_screening(false));
  EXPECT_FALSE(detail::set_mse_screening(true));
  EXPECT_TRUE(detail::set_mse_screening(true));
}

TEST(RoundingScreen, DecidesOnlyWhatTheDoubleSumsDecide) {
  std::mt19937 rng(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int decided = 0, trials = 0;
  for (std::size_t n : {16, 32, 128, 4096})
    for (int t = 0; t < 4000; ++t, ++trials) {
      // Lane 0's differences; every other lane the same in another order,
      // or with one of them moved by a relative 10^-9 ... 10^-1.
      const float scale = static_cast<float>(std::exp2(40.0 * u(rng) - 20.0));
      std::vector<float> e0(n);
      for (auto& v : e0) v = n01(rng) * scale;
      float f[8];
      double d[8];
      for (int lane = 0; lane < 8; ++lane) {
        std::vector<float> e = e0;
        if (lane > 0 && u(rng) < 0.5) {
          std::shuffle(e.begin(), e.end(), rng);
        } else if (lane > 0) {
          const std::size_t i = static_cast<std::size_t>(u(rng) * static_cast<double>(n));
          e[i] *= static_cast<float>(1.0 + (u(rng) < 0.5 ? -1 : 1) * std::pow(10.0, -9.0 + 8.0 * u(rng)));
        }
        f[lane] = 0.0f;
        d[lane] = 0.0;
        for (float v : e) {
          f[lane] += v * v;
          d[lane] += static_cast<double>(v) * static_cast<double>(v);
        }
      }
      const int k = detail::screened_lane(f, 0, 8, n, 1.0f, [](int, int) { return false; });
      if (k < 0) continue;
      ++decided;
      ASSERT_EQ(k, detail::best_lane(d, 0, 8)) << "n " << n << " trial " << t;
    }
  // Lanes a relative 10^-3 or more apart are decided: the screen is not empty.
  EXPECT_GT(decided, trials / 20);
  std::printf("decided %d of %d near-tie trials\n", decided, trials);
}
