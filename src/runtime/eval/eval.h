#pragma once
// Quality of quantized checkpoints against their base, measured with the
// reference runtime: perplexity, KL divergence and top-1 agreement of the
// next-token distributions, and speculative-decoding acceptance when the
// quantized model drafts for the base. Estimators: docs/QUALITY.md.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/eval/eval_stats.h"
#include "runtime/text/tokenizer.h"

namespace selq::runtime {

class CausalLM;
class Tokenizer;

struct EvalOptions {
  std::int64_t context{256};      // tokens per perplexity window (non-overlapping)
  std::int64_t max_tokens{2048};  // text tokens evaluated (0: all)
  int draft_k{7};                 // draft length per verification step
  std::int64_t max_prompts{32};   // prompts used for acceptance (all of a smaller file)
  std::int64_t gen_tokens{32};    // tokens generated per prompt
  // Prompts decoded together in lockstep (runtime/eval/speculate.h); the numbers
  // do not depend on it, only the time and memory (a few MB per prompt).
  int prompt_batch{16};
  bool chat_template{true};       // wrap prompts in the ChatML template when the vocabulary has it
  // Where the base's log-probabilities over the text are cached between runs
  // (base_logprobs.h; "" : not cached), and the most the directory may hold.
  std::string base_cache_dir;
  std::uint64_t base_cache_max_bytes{8ull << 30};
  // (stage, done, total): progress for a bar.
  std::function<void(const std::string&, std::uint64_t, std::uint64_t)> on_progress;
};

struct ModelQuality {
  std::string path;
  std::string dialect;             // "" for an unquantized checkpoint
  std::uint64_t stored_bytes{0};   // safetensors bytes on disk
  double linear_bits_per_weight{0};  // CausalLM::linear_bits_per_weight (= selq plan's)
  std::int64_t tokens{0};          // predicted positions
  double nll{0};                   // mean negative log-likelihood (nats)
  double perplexity{0};
  // vs base (absent for the base itself)
  double kl_mean{0}, kl_p99{0}, top1{0};
  // speculative decoding (quantized drafts for base), per verification step
  std::int64_t steps{0};
  double accepted_greedy{0};       // mean accepted draft tokens, greedy verification
  double accepted_expected{0};     // mean E[accepted] under rejection sampling at T=1
  double seconds{0};
  // Uncertainty (eval_stats.h): llama.cpp's statistics, bootstrap intervals,
  // and the per-window and per-prompt sums they resample.
  KlStatistics stats;
  KlHistogram kl_histogram;  // per-position KL (absent for the base)
  TextIntervals text_ci;
  AcceptanceIntervals acceptance_ci;
  std::vector<WindowSums> window_sums;
  std::vector<PromptSums> prompt_sums;
  nlohmann::json to_json() const;
};

// Quantized model `b` minus `a` on the same windows and prompts.
struct PairedComparison {
  std::size_t a{0}, b{0};  // indices into EvalReport::quantized
  PairedDifference diff;
};

struct EvalReport {
  std::string text_source;
  std::string prompts_source;
  std::int64_t text_tokens{0};
  std::size_t text_bytes{0};  // the evaluated tokens cover text[0, text_bytes)
  std::string base_cache_file;  // "" when not cached
  bool base_cache_hit{false};   // the base's log-probabilities were read from base_cache_file
  EvalOptions options;
  ModelQuality base;
  std::vector<ModelQuality> quantized;
  std::vector<PairedComparison> paired;  // every pair of quantized models
  BootstrapOptions bootstrap;
  nlohmann::json to_json() const;
  std::string table() const;
};

// The tokenizer.json of a checkpoint the runtime is about to run: refused in
// one line first when the runtime does not run its model_type (what a user of
// `selq synth --arch kimi-k3` needs to hear, not that it has no tokenizer),
// BadInput when it has none.
Tokenizer tokenizer_of(const std::string& checkpoint_dir);

// Loads BASE once and each QUANT in turn (memory: base + one model + the
// base's log-probabilities over the evaluated tokens).
EvalReport evaluate(const std::string& base, const std::vector<std::string>& quantized,
                    const std::string& text, const std::string& text_source,
                    const std::vector<std::string>& prompts, const std::string& prompts_source,
                    const EvalOptions& options);

// ---- building blocks (tested on their own) ----

// Non-overlapping windows of `context` tokens over n tokens; each predicts
// its tokens after the first.
struct Windows {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;  // [begin, end) in tokens
  std::int64_t predicted{0};
};
Windows windows(std::int64_t n, std::int64_t context);

// Calls fn(window, first_row, logp, rows) with the log-probabilities
// [rows, vocab] of each window's predicted positions (the model's cache is
// reset per window); rows are numbered over all windows.
void for_each_window_logprobs(CausalLM& m, const std::vector<std::int32_t>& toks, const Windows& w,
                              const std::function<void(std::size_t, std::int64_t, const float*, std::int64_t)>& fn);

// Log-probabilities [w.predicted, vocab] of every predicted position of every
// window; `nll_sum` gets their NLL.
std::vector<float> text_logprobs(CausalLM& m, const std::vector<std::int32_t>& toks, const Windows& w,
                                 double& nll_sum, const std::function<void(std::uint64_t)>& tick);

// sum_x p(x) (log p(x) - log q(x)) from log-probabilities.
double kl_divergence(const float* logp, const float* logq, std::int64_t n);
// sum_x min(p(x), q(x)) from log-probabilities: the probability that a
// rejection-sampling verifier accepts a token drafted from q for target p.
double overlap_probability(const float* logp, const float* logq, std::int64_t n);
// E[accepted tokens] of one verification step given the per-position
// acceptance probabilities alpha_1..alpha_k: sum_i prod_{j<=i} alpha_j.
double expected_accepted(const std::vector<double>& alpha);

}  // namespace selq::runtime
