// Evaluation statistics: llama.cpp's definitions on hand-computed cases, and
// properties of the bootstrap intervals and paired differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "runtime/eval/eval_stats.h"

namespace selq::runtime {
namespace {

TEST(EvalStats, InterpolatedPercentileAsLlamaCpp) {
  const std::vector<double> v{0, 10, 20, 30, 40};
  EXPECT_DOUBLE_EQ(interpolated_percentile(v, 0.5), 20);
  EXPECT_DOUBLE_EQ(interpolated_percentile(v, 0.9), 36);  // 0.9*4 = 3.6 -> 30 + 0.6*10
  EXPECT_DOUBLE_EQ(interpolated_percentile(v, 0), 0);
  EXPECT_DOUBLE_EQ(interpolated_percentile(v, 1), 40);
}

TEST(EvalStats, KlStatisticsByHand) {
  // 20 positions: KL alternating 0.1 / 0.3, nll 2 vs base 1, top agreeing on 15.
  std::vector<PositionScore> s;
  for (int i = 0; i < 20; ++i) s.push_back({i % 2 ? 0.3 : 0.1, 2.0, 1.0, i < 15});
  const KlStatistics k = kl_statistics(s);
  EXPECT_EQ(k.count, 20);
  EXPECT_NEAR(k.kld.mean, 0.2, 1e-12);
  // SE as llama.cpp: sqrt((E[x^2] - E[x]^2) / (n - 1)) = sqrt(0.01 / 19)
  EXPECT_NEAR(k.kld.mean_se, std::sqrt(0.01 / 19), 1e-12);
  EXPECT_NEAR(k.kld.median, 0.2, 1e-12);  // even count: mean of the two middle values
  EXPECT_NEAR(k.kld.max, 0.3, 1e-12);
  EXPECT_NEAR(k.kld.min, 0.1, 1e-12);
  EXPECT_NEAR(k.kld.percentile(0.90), 0.3, 1e-12);
  EXPECT_NEAR(k.kld.percentile(0.10), 0.1, 1e-12);
  EXPECT_TRUE(std::isnan(k.kld.percentile(0.5)));  // not one of llama.cpp's fractions
  EXPECT_TRUE(k.to_json()["kld"].contains("p99.9")) << k.to_json().dump();
  EXPECT_NEAR(k.ln_ppl_ratio, 1.0, 1e-12);
  EXPECT_NEAR(k.ppl_ratio, std::exp(1.0), 1e-12);
  EXPECT_NEAR(k.ppl, std::exp(2.0), 1e-12);
  EXPECT_NEAR(k.same_top, 0.75, 1e-12);
  EXPECT_NEAR(k.same_top_se, std::sqrt(0.75 * 0.25 / 19), 1e-12);
  const double dp = std::exp(-2.0) - std::exp(-1.0);  // the correct token lost probability
  EXPECT_NEAR(k.delta_p.mean, dp, 1e-12);
  EXPECT_NEAR(k.dp_rms, std::fabs(dp), 1e-12);
  EXPECT_NEAR(k.delta_p.mean_se, 0, 1e-8);  // constant: no spread (E[x^2]-E[x]^2 rounds to ~1e-18)
}

TEST(EvalStats, FewerThanElevenPositionsHaveNoStandardError) {
  std::vector<PositionScore> s{{0.1, 1, 1, true}, {0.5, 2, 1, false}};
  EXPECT_EQ(kl_statistics(s).kld.mean_se, 0.0);  // llama.cpp reports 0 below 11 values
}

std::vector<WindowSums> random_windows(int n, double kl_scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> e(1.0);
  std::vector<WindowSums> w;
  for (int i = 0; i < n; ++i) {
    WindowSums s;
    for (int t = 0; t < 64; ++t) {
      s.kl += kl_scale * e(rng);
      s.nll += 2 + 0.1 * e(rng);
      s.nll_base += 2;
      s.same_top += e(rng) < 1.5;
      ++s.count;
    }
    w.push_back(s);
  }
  return w;
}

TEST(EvalStats, IntervalsContainTheEstimateAndNarrowWithMoreWindows) {
  const auto few = text_intervals(random_windows(8, 0.1, 1));
  const auto many = text_intervals(random_windows(128, 0.1, 1));
  for (const auto* t : {&few, &many}) {
    EXPECT_LE(t->kl_mean.lo, t->kl_mean.value);
    EXPECT_GE(t->kl_mean.hi, t->kl_mean.value);
    EXPECT_LT(t->kl_mean.lo, t->kl_mean.hi);
    EXPECT_LE(t->ppl_ratio.lo, t->ppl_ratio.value);
    EXPECT_GE(t->same_top.hi, t->same_top.value);
  }
  EXPECT_LT(many.kl_mean.hi - many.kl_mean.lo, 0.5 * (few.kl_mean.hi - few.kl_mean.lo));
  EXPECT_NEAR(many.kl_mean.value, 0.1, 0.01);
  // Deterministic: the same windows give the same interval.
  const auto again = text_intervals(random_windows(8, 0.1, 1));
  EXPECT_EQ(again.kl_mean.lo, few.kl_mean.lo);
  EXPECT_EQ(again.kl_mean.hi, few.kl_mean.hi);
}

TEST(EvalStats, PerplexityIntervalsAreTheExpOfTheMeanNll) {
  const auto w = random_windows(16, 0.1, 3);
  double nll = 0, nll_base = 0, n = 0;
  for (const auto& x : w) {
    nll += x.nll;
    nll_base += x.nll_base;
    n += static_cast<double>(x.count);
  }
  const auto t = text_intervals(w);
  EXPECT_DOUBLE_EQ(t.ppl.value, std::exp(nll / n));
  EXPECT_DOUBLE_EQ(t.ppl_base.value, std::exp(2.0));
  EXPECT_LT(t.ppl.lo, t.ppl.value);
  EXPECT_GT(t.ppl.hi, t.ppl.value);
  EXPECT_NEAR(t.ppl_base.lo, std::exp(2.0), 1e-12);  // every window's base nll is 2 per position
  EXPECT_NEAR(t.ppl_base.hi, std::exp(2.0), 1e-12);
}

TEST(EvalStats, KlPercentileIntervalResamplesWholeWindows) {
  std::mt19937_64 rng(9);
  std::exponential_distribution<double> e(10.0);
  std::vector<PositionScore> scores(32 * 40);
  std::vector<double> kl;
  for (auto& p : scores) kl.push_back(p.kl = e(rng));
  const std::vector<std::int64_t> sizes(32, 40);
  std::sort(kl.begin(), kl.end());
  const auto p99 = kl_percentile_interval(scores, sizes, 0.99);
  EXPECT_DOUBLE_EQ(p99.value, interpolated_percentile(kl, 0.99));
  EXPECT_LT(p99.lo, p99.value);
  EXPECT_GT(p99.hi, p99.value);
  EXPECT_NEAR(p99.value, std::log(100.0) / 10, 0.1);  // the exponential's 99th percentile
  // One window far out moves the percentile only in the resamples that draw it.
  auto spiked = scores;
  for (std::size_t i = 0; i < 40; ++i) spiked[i].kl = 5.0;
  const auto s99 = kl_percentile_interval(spiked, sizes, 0.99);
  EXPECT_GT(s99.hi, 4.0);
  EXPECT_LT(s99.lo, 1.0);
  EXPECT_TRUE(std::isnan(kl_percentile_interval(scores, std::vector<std::int64_t>(4, 320), 0.99).lo));
  EXPECT_THROW(kl_percentile_interval(scores, std::vector<std::int64_t>(31, 40), 0.99), Error);
}

TEST(EvalStats, FewWindowsHaveNoInterval) {
  for (int n : {1, 2, 7}) {
    const auto t = text_intervals(random_windows(n, 0.1, 2));
    EXPECT_TRUE(std::isnan(t.kl_mean.lo)) << n;
    EXPECT_TRUE(std::isfinite(t.kl_mean.value)) << n;
  }
}

TEST(EvalStats, PairedDifferenceSeparatesWhatUnpairedIntervalsDoNot) {
  // b is a plus a small constant on every window: the windows vary a lot, the
  // difference does not, so the paired interval excludes 0 while the two
  // models' own intervals overlap.
  auto a = random_windows(16, 0.5, 3);
  auto b = a;
  for (auto& w : b) w.kl += 0.01 * static_cast<double>(w.count);
  std::vector<PromptSums> p;
  for (int i = 0; i < 8; ++i) p.push_back({10 + i, 30.0 + 3 * i, 28.0 + i});
  const auto d = paired_difference(a, b, p, p);
  EXPECT_NEAR(d.kl_mean.value, 0.01, 1e-12);
  EXPECT_GT(d.kl_mean.lo, 0.0);
  EXPECT_NEAR(d.kl_mean.lo, 0.01, 1e-9);
  const auto ia = text_intervals(a), ib = text_intervals(b);
  EXPECT_LT(ib.kl_mean.lo, ia.kl_mean.hi);  // unpaired: overlapping
  // Identical prompts: the acceptance difference is exactly 0.
  EXPECT_EQ(d.accepted_greedy.value, 0.0);
  EXPECT_EQ(d.accepted_greedy.lo, 0.0);
  EXPECT_EQ(d.accepted_greedy.hi, 0.0);
}

TEST(EvalStats, AcceptanceIsARatioOfSumsOverPrompts) {
  std::vector<PromptSums> p;
  for (int i = 0; i < 4; ++i) {
    p.push_back({10, 30, 28});
    p.push_back({10, 50, 40});
  }
  const auto a = acceptance_intervals(p);
  EXPECT_NEAR(a.greedy.value, 4.0, 1e-12);
  EXPECT_NEAR(a.expected.value, 3.4, 1e-12);
  EXPECT_GE(a.greedy.lo, 3.0 - 1e-12);  // a resample is all-3, all-5 or between
  EXPECT_LE(a.greedy.hi, 5.0 + 1e-12);
  EXPECT_LT(a.greedy.lo, a.greedy.hi);
  p.resize(7);
  EXPECT_TRUE(std::isnan(acceptance_intervals(p).greedy.lo));  // too few prompts for an interval
}

TEST(EvalStats, WindowSumsCoverEveryPosition) {
  std::vector<PositionScore> s(5, {0.1, 1, 1, true});
  auto w = window_sums(s, {2, 3});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].count, 2);
  EXPECT_EQ(w[1].count, 3);
  EXPECT_NEAR(w[1].kl, 0.3, 1e-12);
  EXPECT_THROW(window_sums(s, {2, 2}), Error);
  EXPECT_THROW(window_sums(s, {3, 3}), Error);
}

TEST(EvalStats, KlHistogramBinsOnLogEdges) {
  std::vector<PositionScore> s;
  for (double kl : {0.0, 5e-7, 1e-6, 0.0015, 0.0015, 0.5, 1e3}) s.push_back({kl, 0, 0, false});
  const KlHistogram h = kl_histogram(s);
  ASSERT_EQ(h.edges.size(), h.counts.size() + 1);
  EXPECT_EQ(h.edges.front(), 0.0);
  EXPECT_DOUBLE_EQ(h.edges[1], 1e-6);
  EXPECT_DOUBLE_EQ(h.edges.back(), 1e2);
  auto bin_of = [&](double v) {
    for (std::size_t i = 0; i + 1 < h.edges.size(); ++i)
      if (v >= h.edges[i] && v < h.edges[i + 1]) return i;
    return h.counts.size() - 1;
  };
  EXPECT_EQ(h.counts[0], 2);              // 0 and 5e-7
  EXPECT_EQ(h.counts[1], 1);              // 1e-6 opens the first decade's first bin
  EXPECT_EQ(h.counts[bin_of(0.0015)], 2);
  EXPECT_EQ(h.counts[bin_of(0.5)], 1);
  EXPECT_EQ(h.counts.back(), 1);          // 1e3 clamps into the last bin
  std::int64_t total = 0;
  for (auto c : h.counts) total += c;
  EXPECT_EQ(total, 7);
}

}  // namespace
}  // namespace selq::runtime
