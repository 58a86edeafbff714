#include "runtime/eval/eval_stats.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::runtime {
namespace {

using json = nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// llama.cpp's mean_and_uncertainty: the standard error of the mean, 0 below 11 values.
std::pair<double, double> mean_and_se(double sum, double sum2, std::int64_t count) {
  if (count < 1) return {0, 0};
  const double n = static_cast<double>(count);
  const double f = sum / n;
  const double var = sum2 / n - f * f;
  return {f, var > 0 && count > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

double covariance(double suma, double sumb, double sumab, std::int64_t count) {
  if (count < 10) return 0;
  const double n = static_cast<double>(count);
  return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

double median_of(const std::vector<double>& s) {
  const std::size_t n = s.size();
  return n % 2 == 0 ? 0.5 * (s[n / 2] + s[n / 2 - 1]) : s[n / 2];
}

Distribution distribution(std::vector<double> values, std::pair<double, double> mean_se,
                          std::initializer_list<double> fractions) {
  std::sort(values.begin(), values.end());
  Distribution d{mean_se.first, mean_se.second, values.front(), median_of(values), values.back(), {}};
  for (double f : fractions) d.percentiles.emplace_back(f, interpolated_percentile(values, f));
  return d;
}

// The 2.5% and 97.5% points of `stat` over resamples of `n` units.
// Below this many windows or prompts a resampled interval says little (two
// windows give at most three distinct values), so none is given.
constexpr std::size_t kMinUnits = 8;

// `stat` of the n units (the estimate) and its interval over resamples of them.
template <class Stat>
Interval bootstrap(std::size_t n, const BootstrapOptions& o, std::uint64_t stream, Stat stat) {
  std::vector<std::size_t> all(n);
  for (std::size_t i = 0; i < n; ++i) all[i] = i;
  const double value = n ? stat(all) : kNaN;
  if (n < kMinUnits || o.resamples < 2) return {value, kNaN, kNaN};
  std::mt19937_64 rng(o.seed ^ (stream * 0x9E3779B97F4A7C15ull));
  std::uniform_int_distribution<std::size_t> pick(0, n - 1);
  std::vector<std::size_t> idx(n);
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(o.resamples));
  for (int r = 0; r < o.resamples; ++r) {
    for (auto& i : idx) i = pick(rng);
    const double v = stat(idx);
    if (std::isfinite(v)) values.push_back(v);
  }
  if (values.size() < 2) return {value, kNaN, kNaN};
  std::sort(values.begin(), values.end());
  return {value, interpolated_percentile(values, 0.025), interpolated_percentile(values, 0.975)};
}

// Ratio of two sums over the resampled units.
template <class Unit, class Num, class Den>
double ratio_of(const std::vector<Unit>& u, const std::vector<std::size_t>& idx, Num num, Den den) {
  double a = 0, b = 0;
  for (auto i : idx) {
    a += num(u[i]);
    b += den(u[i]);
  }
  return b > 0 ? a / b : kNaN;
}

const auto kWin = [](const WindowSums& w) { return static_cast<double>(w.count); };
const auto kKl = [](const WindowSums& w) { return w.kl; };
const auto kTop = [](const WindowSums& w) { return w.same_top; };
const auto kLnRatio = [](const WindowSums& w) { return w.nll - w.nll_base; };
const auto kNll = [](const WindowSums& w) { return w.nll; };
const auto kNllBase = [](const WindowSums& w) { return w.nll_base; };
const auto kSteps = [](const PromptSums& p) { return static_cast<double>(p.steps); };
const auto kGreedy = [](const PromptSums& p) { return p.greedy; };
const auto kExpected = [](const PromptSums& p) { return p.expected; };

double exp_or_nan(double x) { return std::isfinite(x) ? std::exp(x) : kNaN; }

// Stream ids keep each statistic's resamples apart while a and b of a pair share theirs.
enum Stream : std::uint64_t { kText = 1, kPrompts = 2 };

}  // namespace

double interpolated_percentile(const std::vector<double>& sorted, double fraction) {
  if (sorted.empty()) return kNaN;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * static_cast<double>(sorted.size() - 1);
  const auto ip = static_cast<std::size_t>(p);
  const double t = p - static_cast<double>(ip);
  return (1 - t) * sorted[ip] + t * sorted[std::min(ip + 1, sorted.size() - 1)];
}

KlStatistics kl_statistics(const std::vector<PositionScore>& scores) {
  KlStatistics s;
  s.count = static_cast<std::int64_t>(scores.size());
  if (scores.empty()) return s;
  double nll = 0, nll2 = 0, nb = 0, nb2 = 0, nnb = 0, kl = 0, kl2 = 0, dp = 0, dp2 = 0, dp4 = 0;
  std::int64_t same = 0;
  std::vector<double> kls, dps;
  kls.reserve(scores.size());
  dps.reserve(scores.size());
  for (const auto& p : scores) {
    nll += p.nll;
    nll2 += p.nll * p.nll;
    nb += p.nll_base;
    nb2 += p.nll_base * p.nll_base;
    nnb += p.nll * p.nll_base;
    kl += p.kl;
    kl2 += p.kl * p.kl;
    const double d = std::exp(-p.nll) - std::exp(-p.nll_base);  // Δp of the correct token
    dp += d;
    dp2 += d * d;
    dp4 += d * d * d * d;
    same += p.same_top;
    kls.push_back(p.kl);
    dps.push_back(d);
  }
  const std::int64_t n = s.count;
  const auto lp = mean_and_se(nll, nll2, n);
  const auto lb = mean_and_se(nb, nb2, n);
  s.ppl = std::exp(lp.first);
  s.ppl_se = s.ppl * lp.second;
  s.ppl_base = std::exp(lb.first);
  s.ppl_base_se = s.ppl_base * lb.second;
  const double cov = covariance(nll, nb, nnb, n);
  s.cor_ln_ppl = lp.second > 0 && lb.second > 0 ? cov / (lp.second * lb.second) : 0;
  s.ln_ppl_ratio = lp.first - lb.first;
  s.ln_ppl_ratio_se = std::sqrt(std::max(0.0, lp.second * lp.second + lb.second * lb.second - 2 * cov));
  s.ppl_ratio = std::exp(s.ln_ppl_ratio);
  s.ppl_ratio_se = s.ppl_ratio * s.ln_ppl_ratio_se;
  const auto mse = mean_and_se(dp2, dp4, n);
  s.dp_rms = std::sqrt(mse.first);
  s.dp_rms_se = s.dp_rms > 0 ? 0.5 / s.dp_rms * mse.second : 0;
  s.same_top = static_cast<double>(same) / static_cast<double>(n);
  s.same_top_se = n > 1 ? std::sqrt(s.same_top * (1 - s.same_top) / static_cast<double>(n - 1)) : 0;
  s.kld = distribution(std::move(kls), mean_and_se(kl, kl2, n), {0.999, 0.99, 0.95, 0.90, 0.10, 0.05, 0.01, 0.001});
  s.delta_p = distribution(std::move(dps), mean_and_se(dp, dp2, n),
                           {0.999, 0.99, 0.95, 0.90, 0.75, 0.25, 0.10, 0.05, 0.01, 0.001});
  return s;
}

double Distribution::percentile(double fraction) const {
  for (const auto& [f, v] : percentiles)
    if (f == fraction) return v;
  return kNaN;
}

json Distribution::to_json() const {
  json j = {{"mean", {{"value", mean}, {"se", mean_se}}}, {"max", max}, {"median", median}, {"min", min}};
  for (const auto& [f, v] : percentiles) j[fmt::format("p{}", 100 * f)] = v;
  return j;
}

KlHistogram kl_histogram(const std::vector<PositionScore>& scores) {
  constexpr int kPerDecade = 4, kFirst = -6, kLast = 2;
  KlHistogram h;
  h.edges.push_back(0);
  for (int i = kFirst * kPerDecade; i <= kLast * kPerDecade; ++i)
    h.edges.push_back(std::pow(10.0, static_cast<double>(i) / kPerDecade));
  h.counts.assign(h.edges.size() - 1, 0);
  for (const auto& p : scores) {
    // upper_bound finds the first edge above the value; its bin is the one before.
    auto it = std::upper_bound(h.edges.begin(), h.edges.end(), std::max(0.0, p.kl));
    const auto bin = std::min<std::ptrdiff_t>(it - h.edges.begin() - 1, static_cast<std::ptrdiff_t>(h.counts.size()) - 1);
    ++h.counts[static_cast<std::size_t>(bin)];
  }
  return h;
}

json KlStatistics::to_json() const {
  auto pm = [](double v, double se) { return json{{"value", v}, {"se", se}}; };
  json dp = delta_p.to_json();
  dp["rms"] = pm(dp_rms, dp_rms_se);
  return {{"positions", count},
          {"ppl_q", pm(ppl, ppl_se)},
          {"ppl_base", pm(ppl_base, ppl_base_se)},
          {"cor_ln_ppl", cor_ln_ppl},
          {"ln_ppl_ratio", pm(ln_ppl_ratio, ln_ppl_ratio_se)},
          {"ppl_ratio", pm(ppl_ratio, ppl_ratio_se)},
          {"kld", kld.to_json()},
          {"delta_p", dp},
          {"same_top_p", pm(same_top, same_top_se)}};
}

std::vector<WindowSums> window_sums(const std::vector<PositionScore>& scores,
                                    const std::vector<std::int64_t>& window_sizes) {
  std::vector<WindowSums> out;
  std::size_t at = 0;
  for (auto n : window_sizes) {
    WindowSums w;
    for (std::int64_t i = 0; i < n; ++i, ++at) {
      if (at >= scores.size()) throw Error(ErrorKind::Internal, "window sizes exceed the scored positions");
      const auto& p = scores[at];
      w.kl += p.kl;
      w.nll += p.nll;
      w.nll_base += p.nll_base;
      w.same_top += p.same_top;
      ++w.count;
    }
    out.push_back(w);
  }
  if (at != scores.size()) throw Error(ErrorKind::Internal, "window sizes do not cover the scored positions");
  return out;
}

TextIntervals text_intervals(const std::vector<WindowSums>& w, const BootstrapOptions& o) {
  TextIntervals t;
  const std::size_t n = w.size();
  t.kl_mean = bootstrap(n, o, kText, [&](const auto& idx) { return ratio_of(w, idx, kKl, kWin); });
  t.ppl_ratio = bootstrap(n, o, kText, [&](const auto& idx) { return exp_or_nan(ratio_of(w, idx, kLnRatio, kWin)); });
  t.same_top = bootstrap(n, o, kText, [&](const auto& idx) { return ratio_of(w, idx, kTop, kWin); });
  t.ppl = bootstrap(n, o, kText, [&](const auto& idx) { return exp_or_nan(ratio_of(w, idx, kNll, kWin)); });
  t.ppl_base = bootstrap(n, o, kText, [&](const auto& idx) { return exp_or_nan(ratio_of(w, idx, kNllBase, kWin)); });
  return t;
}

Interval kl_percentile_interval(const std::vector<PositionScore>& scores, const std::vector<std::int64_t>& window_sizes,
                                double fraction, const BootstrapOptions& o) {
  std::vector<std::size_t> start{0};
  for (auto n : window_sizes) start.push_back(start.back() + static_cast<std::size_t>(n));
  if (start.back() != scores.size()) throw Error(ErrorKind::Internal, "window sizes do not cover the scored positions");
  std::vector<double> kl;
  return bootstrap(window_sizes.size(), o, kText, [&](const auto& idx) {
    kl.clear();
    for (auto i : idx)
      for (std::size_t p = start[i]; p < start[i + 1]; ++p) kl.push_back(scores[p].kl);
    std::sort(kl.begin(), kl.end());
    return interpolated_percentile(kl, fraction);
  });
}

AcceptanceIntervals acceptance_intervals(const std::vector<PromptSums>& p, const BootstrapOptions& o) {
  AcceptanceIntervals a;
  a.greedy = bootstrap(p.size(), o, kPrompts, [&](const auto& idx) { return ratio_of(p, idx, kGreedy, kSteps); });
  a.expected =
      bootstrap(p.size(), o, kPrompts, [&](const auto& idx) { return ratio_of(p, idx, kExpected, kSteps); });
  return a;
}

PairedDifference paired_difference(const std::vector<WindowSums>& a, const std::vector<WindowSums>& b,
                                   const std::vector<PromptSums>& pa, const std::vector<PromptSums>& pb,
                                   const BootstrapOptions& o) {
  if (a.size() != b.size() || pa.size() != pb.size())
    throw Error(ErrorKind::Internal, "paired difference of evaluations on different windows or prompts");
  PairedDifference d;
  auto diff_text = [&](auto num, bool ppl) {
    return bootstrap(a.size(), o, kText, [&, num, ppl](const auto& idx) {
      const double x = ratio_of(a, idx, num, kWin), y = ratio_of(b, idx, num, kWin);
      return ppl ? exp_or_nan(y) - exp_or_nan(x) : y - x;
    });
  };
  d.kl_mean = diff_text(kKl, false);
  d.ppl_ratio = diff_text(kLnRatio, true);
  d.same_top = diff_text(kTop, false);
  auto diff_prompts = [&](auto num) {
    return bootstrap(pa.size(), o, kPrompts, [&, num](const auto& idx) {
      return ratio_of(pb, idx, num, kSteps) - ratio_of(pa, idx, num, kSteps);
    });
  };
  d.accepted_greedy = diff_prompts(kGreedy);
  d.accepted_expected = diff_prompts(kExpected);
  return d;
}

json TextIntervals::to_json() const {
  return {{"kl_mean", kl_mean.to_json()}, {"ppl_ratio", ppl_ratio.to_json()}, {"same_top_p", same_top.to_json()},
          {"ppl", ppl.to_json()},         {"ppl_base", ppl_base.to_json()},   {"kl_p99", kl_p99.to_json()}};
}

json AcceptanceIntervals::to_json() const {
  return {{"accepted_greedy", greedy.to_json()}, {"accepted_expected_t1", expected.to_json()}};
}

json PairedDifference::to_json() const {
  return {{"kl_mean", kl_mean.to_json()},
          {"ppl_ratio", ppl_ratio.to_json()},
          {"same_top_p", same_top.to_json()},
          {"accepted_greedy", accepted_greedy.to_json()},
          {"accepted_expected_t1", accepted_expected.to_json()}};
}

}  // namespace selq::runtime
