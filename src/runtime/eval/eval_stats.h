#pragma once
// Statistics of an evaluation, with their uncertainty (docs/QUALITY.md,
// "Estimators"):
// - the figures llama.cpp's `llama-perplexity --kl-divergence` prints, with
//   its names and definitions (tools/perplexity/perplexity.cpp): mean ± SE
//   from the per-position sums, percentiles interpolated between sorted values;
// - 95% percentile-bootstrap intervals that resample whole windows of text
//   (positions within a window are correlated) or whole prompts, with a fixed
//   seed so the same inputs give the same interval (none below 8 windows or
//   prompts: NaN bounds);
// - paired differences of two quantized models on the same windows and
//   prompts, resampled together.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {

// One scored position of a quantized model against the base.
struct PositionScore {
  double kl{0};        // KL(base || quantized)
  double nll{0};       // -log q(correct token)
  double nll_base{0};  // -log p(correct token)
  bool same_top{false};
};

// Per-window sums: what the bootstrap resamples.
struct WindowSums {
  double kl{0}, nll{0}, nll_base{0}, same_top{0};
  std::int64_t count{0};
};

// Per-prompt totals of speculative decoding.
struct PromptSums {
  std::int64_t steps{0};
  double greedy{0}, expected{0};
};

struct Interval {
  double value{0}, lo{0}, hi{0};
  nlohmann::json to_json() const { return {{"value", value}, {"lo", lo}, {"hi", hi}}; }
};

struct BootstrapOptions {
  int resamples{1000};
  std::uint64_t seed{0x5e1a5eed};
};

// A per-position quantity as llama.cpp summarises it: mean ± SE, extremes,
// median (mean of the two middle values for an even count) and percentiles.
struct Distribution {
  double mean{0}, mean_se{0}, min{0}, median{0}, max{0};
  std::vector<std::pair<double, double>> percentiles;  // (fraction, value), llama.cpp's fractions
  double percentile(double fraction) const;            // one of `percentiles`; NaN if not there
  nlohmann::json to_json() const;
};

// llama.cpp's statistics of one quantized model (fractions, not percent).
struct KlStatistics {
  std::int64_t count{0};
  double ppl{0}, ppl_se{0}, ppl_base{0}, ppl_base_se{0};
  double ln_ppl_ratio{0}, ln_ppl_ratio_se{0}, ppl_ratio{0}, ppl_ratio_se{0};
  double cor_ln_ppl{0};
  Distribution kld;      // percentiles 99.9, 99, 95, 90, 10, 5, 1, 0.1
  Distribution delta_p;  // p_quant - p_base of the correct token; also 75 and 25
  double dp_rms{0}, dp_rms_se{0};
  double same_top{0}, same_top_se{0};
  nlohmann::json to_json() const;
};
KlStatistics kl_statistics(const std::vector<PositionScore>& scores);

// Per-position KL as a histogram on log-spaced bins, for pictures of where
// the divergence sits (selq report): bin 0 is [0, 1e-6), then 4 bins per
// decade up to 1e2 (larger values count in the last bin).
struct KlHistogram {
  std::vector<double> edges;          // counts.size() + 1 edges
  std::vector<std::int64_t> counts;
  nlohmann::json to_json() const { return {{"edges", edges}, {"counts", counts}}; }
};
KlHistogram kl_histogram(const std::vector<PositionScore>& scores);

// llama.cpp's percentile: linear between the sorted values at fraction*(n-1).
double interpolated_percentile(const std::vector<double>& sorted, double fraction);

// Sums of `scores` per window; `window_sizes` add up to scores.size().
std::vector<WindowSums> window_sums(const std::vector<PositionScore>& scores,
                                    const std::vector<std::int64_t>& window_sizes);

// 95% intervals over windows. ppl is exp(mean nll), ppl_base the base's on
// the same windows, ppl_ratio exp(mean nll - mean nll_base); kl_p99 is set by
// kl_percentile_interval (it needs every position, not window sums).
struct TextIntervals {
  Interval kl_mean, ppl_ratio, same_top, ppl, ppl_base, kl_p99;
  nlohmann::json to_json() const;
};
TextIntervals text_intervals(const std::vector<WindowSums>& windows, const BootstrapOptions& o = {});

// The KL percentile over all positions (llama.cpp's interpolation) and its
// interval over the same resamples of whole windows as text_intervals.
Interval kl_percentile_interval(const std::vector<PositionScore>& scores, const std::vector<std::int64_t>& window_sizes,
                                double fraction, const BootstrapOptions& o = {});

struct AcceptanceIntervals {
  Interval greedy, expected;  // accepted tokens per verification step
  nlohmann::json to_json() const;
};
AcceptanceIntervals acceptance_intervals(const std::vector<PromptSums>& prompts, const BootstrapOptions& o = {});

// b minus a on the same windows and prompts (same resampling for both).
struct PairedDifference {
  Interval kl_mean, ppl_ratio, same_top, accepted_greedy, accepted_expected;
  nlohmann::json to_json() const;
};
PairedDifference paired_difference(const std::vector<WindowSums>& a, const std::vector<WindowSums>& b,
                                   const std::vector<PromptSums>& pa, const std::vector<PromptSums>& pb,
                                   const BootstrapOptions& o = {});

}  // namespace selq::runtime
