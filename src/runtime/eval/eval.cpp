// selq eval: perplexity, KL, top-1 agreement and draft acceptance.
#include "runtime/eval/eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "runtime/eval/base_logprobs.h"
#include "runtime/eval/speculate.h"
#include "runtime/model/architectures.h"
#include "runtime/model/causal_lm.h"
#include "runtime/model/llama.h"
#include "runtime/model/numerics.h"
#include "runtime/text/chatml.h"
#include "runtime/text/text_overlap.h"
#include "runtime/text/tokenizer.h"

namespace selq::runtime {

namespace fs = std::filesystem;
using json = nlohmann::json;

double kl_divergence(const float* logp, const float* logq, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double lp = logp[i];
    s += std::exp(lp) * (lp - static_cast<double>(logq[i]));
  }
  return std::max(0.0, s);  // rounding can leave -1e-9 for identical rows
}

double overlap_probability(const float* logp, const float* logq, std::int64_t n) {
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(std::min(logp[i], logq[i])));
  return std::min(1.0, s);
}

double expected_accepted(const std::vector<double>& alpha) {
  double e = 0, prod = 1;
  for (double a : alpha) {
    prod *= a;
    e += prod;
  }
  return e;
}

Tokenizer tokenizer_of(const std::string& dir) {
  require_runtime_architecture(dir);
  auto path = fs::path(dir) / "tokenizer.json";
  if (!fs::exists(path)) throw_bad_input(fmt::format("{}: no tokenizer.json to tokenize the text with", dir));
  return Tokenizer::from_tokenizer_json_file(path.string());
}

json ModelQuality::to_json() const {
  return {{"path", path},
          {"dialect", dialect},
          {"stored_bytes", stored_bytes},
          {"linear_bits_per_weight", linear_bits_per_weight},
          {"tokens", tokens},
          {"nll", nll},
          {"perplexity", perplexity},
          {"kl_mean", kl_mean},
          {"kl_p99", kl_p99},
          {"top1_agreement", top1},
          {"spec_steps", steps},
          {"accepted_greedy", accepted_greedy},
          {"accepted_expected_t1", accepted_expected},
          {"seconds", seconds},
          {"statistics", stats.to_json()},
          {"kl_histogram", kl_histogram.to_json()},
          {"intervals", {{"text", text_ci.to_json()}, {"acceptance", acceptance_ci.to_json()}}}};
}

json EvalReport::to_json() const {
  json q = json::array();
  for (const auto& m : quantized) q.push_back(m.to_json());
  json pairs = json::array();
  for (const auto& p : paired)
    pairs.push_back({{"a", quantized[p.a].path}, {"b", quantized[p.b].path}, {"b_minus_a", p.diff.to_json()}});
  return {{"text_source", text_source},
          {"text_tokens", text_tokens},
          {"text_bytes", {0, text_bytes}},
          {"base_logprobs", {{"file", base_cache_file}, {"cached", base_cache_hit}}},
          {"prompts_source", prompts_source},
          {"context", options.context},
          {"draft_k", options.draft_k},
          {"gen_tokens", options.gen_tokens},
          {"base", base.to_json()},
          {"quantized", q},
          {"paired", pairs},
          {"uncertainty",
           {{"level", 0.95},
            {"method", "percentile bootstrap: text statistics resample whole windows, acceptance whole prompts; "
                       "paired differences resample both models' windows and prompts together"},
            {"resamples", bootstrap.resamples},
            {"seed", bootstrap.seed},
            {"windows", quantized.empty() ? 0 : quantized.front().window_sums.size()},
            {"prompts", quantized.empty() ? 0 : quantized.front().prompt_sums.size()},
            {"se", "statistics.*.se: llama.cpp's standard errors (llama-perplexity --kl-divergence)"}}}};
}

namespace {

// "0.0267 [0.0231, 0.0305]"; the interval is left out when there is none.
std::string with_interval(const Interval& i, int precision, double scale = 1) {
  if (!std::isfinite(i.lo) || !std::isfinite(i.hi)) return fmt::format("{:.{}f}", scale * i.value, precision);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", scale * i.value, precision, scale * i.lo, precision,
                     scale * i.hi, precision);
}

std::string model_name(const ModelQuality& m) {
  std::string name = fs::path(m.path).filename().string();
  return name.empty() ? m.path : name;
}

}  // namespace

std::string EvalReport::table() const {
  std::string s = fmt::format("text: {} (bytes 0-{}, {} tokens, context {}); prompts: {} (k={})\n", text_source,
                              text_bytes, text_tokens, options.context, prompts_source.empty() ? "none" : prompts_source, options.draft_k);
  s += fmt::format("{:<34} {:>9} {:>6} {:>26} {:>24} {:>27} {:>21} {:>20} {:>18} {:>18}\n", "model", "size",
                   "bits/w", "ppl", "ppl/base", "KL mean", "KL p99", "top-1 %", "acc gr", "acc T=1");
  if (!base_cache_file.empty())
    s += fmt::format("base log-probabilities: {} {}\n", base_cache_hit ? "read from" : "cached in", base_cache_file);
  auto row = [&](const ModelQuality& m, bool is_base) {
    auto size = fmt::format("{:.1f} MB", static_cast<double>(m.stored_bytes) / 1e6);
    if (is_base) {
      // The base's interval comes from its windows as any quantized model's pass scored them.
      const std::string ppl = quantized.empty() ? fmt::format("{:.3f}", m.perplexity)
                                                : with_interval(quantized.front().text_ci.ppl_base, 3);
      s += fmt::format("{:<34} {:>9} {:>6.2f} {:>26} {:>24} {:>27} {:>21} {:>20} {:>18} {:>18}\n",
                       model_name(m) + " (base)", size, m.linear_bits_per_weight, ppl, "-", "-", "-", "-", "-", "-");
      return;
    }
    auto acc = [&](const Interval& v) { return m.steps ? with_interval(v, 2) : std::string("-"); };
    s += fmt::format("{:<34} {:>9} {:>6.2f} {:>26} {:>24} {:>27} {:>21} {:>20} {:>18} {:>18}\n", model_name(m),
                     size, m.linear_bits_per_weight, with_interval(m.text_ci.ppl, 3), with_interval(m.text_ci.ppl_ratio, 4),
                     with_interval(m.text_ci.kl_mean, 4), with_interval(m.text_ci.kl_p99, 3),
                     with_interval(m.text_ci.same_top, 1, 100),
                     acc(m.acceptance_ci.greedy), acc(m.acceptance_ci.expected));
  };
  row(base, true);
  for (const auto& m : quantized) row(m, false);
  s += fmt::format("[lo, hi]: 95% bootstrap intervals ({} resamples of {} windows; acceptance of {} prompts). "
                   "acc gr: draft tokens accepted per verification step (greedy, of {}); acc T=1: expected under "
                   "rejection sampling at temperature 1 along the greedy draft\n",
                   bootstrap.resamples, quantized.empty() ? 0 : quantized.front().window_sums.size(),
                   quantized.empty() ? 0 : quantized.front().prompt_sums.size(), options.draft_k);
  if (!quantized.empty()) s += "llama.cpp's statistics (llama-perplexity --kl-divergence definitions, ± SE):\n";
  for (const auto& m : quantized) {
    const auto& k = m.stats;
    s += fmt::format("  {}: Mean KLD {:.6f} ± {:.6f}, median {:.6f}, 90% {:.6f}, 95% {:.6f}, 99% {:.6f}, 99.9% {:.6f}, "
                     "max {:.6f}; Mean Δp {:.3f} ± {:.3f} %, RMS Δp {:.3f} ± {:.3f} %; Same top p {:.3f} ± {:.3f} %; "
                     "Mean ln(PPL(Q)/PPL(base)) {:.6f} ± {:.6f}\n",
                     model_name(m), k.kld.mean, k.kld.mean_se, k.kld.median, k.kld.percentile(0.90),
                     k.kld.percentile(0.95), k.kld.percentile(0.99), k.kld.percentile(0.999), k.kld.max,
                     100 * k.delta_p.mean, 100 * k.delta_p.mean_se, 100 * k.dp_rms, 100 * k.dp_rms_se,
                     100 * k.same_top, 100 * k.same_top_se, k.ln_ppl_ratio, k.ln_ppl_ratio_se);
  }
  if (!paired.empty()) {
    s += "paired differences, b - a on the same windows and prompts (95% intervals; an interval without 0 "
         "separates the two):\n";
    for (const auto& p : paired) {
      const auto& d = p.diff;
      const bool acc = quantized[p.a].steps > 0;
      s += fmt::format("  {} - {}: KL mean {}, top-1 {} pts, acc gr {}, acc T=1 {}\n", model_name(quantized[p.b]),
                       model_name(quantized[p.a]), with_interval(d.kl_mean, 4), with_interval(d.same_top, 1, 100),
                       acc ? with_interval(d.accepted_greedy, 2) : std::string("-"),
                       acc ? with_interval(d.accepted_expected, 2) : std::string("-"));
    }
  }
  return s;
}

namespace {

// The calibration a quantized checkpoint's manifest records, if any.
std::optional<json> manifest_calibration(const std::string& dir) {
  const fs::path m = fs::path(dir) / io::kManifestName;
  std::error_code ec;
  if (!fs::is_regular_file(m, ec)) return std::nullopt;
  std::ifstream in(m);
  json j = json::parse(in, nullptr, false);
  if (!j.is_object() || !j.contains("calibration") || !j["calibration"].is_object()) return std::nullopt;
  return j["calibration"];
}

std::uint64_t stored_bytes(const std::string& dir) {
  std::uint64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors") n += e.file_size();
  return n;
}

std::vector<std::vector<std::int32_t>> prompt_tokens(const Tokenizer& tok, const std::vector<std::string>& prompts,
                                                     bool chat, std::set<std::int32_t>& stop) {
  const bool chatml = chat && tok.token_id(kImStart) && tok.token_id(kImEnd);
  if (chatml) stop.insert(*tok.token_id(kImEnd));
  if (tok.special_ids().eos) stop.insert(*tok.special_ids().eos);
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& p : prompts)
    out.push_back(tok.encode(chatml ? render_chatml({{"user", p}}) : p));
  return out;
}

// The base's rows over the text: from the cache when it holds them for this
// model, text and window length, else computed (and then cached).
BaseLogProbs base_logprobs(CausalLM& base, const std::string& base_path, const std::vector<std::int32_t>& toks,
                           const std::vector<std::int32_t>& targets, const Windows& w, const EvalOptions& o,
                           EvalReport& rep, const std::function<void()>& tick) {
  std::string key;
  if (!o.base_cache_dir.empty()) {
    key = base_logprobs_key(base_path, toks, o.context);
    rep.base_cache_file = (fs::path(o.base_cache_dir) / (key + ".blp")).string();
    if (auto cached = BaseLogProbs::load(rep.base_cache_file, key);
        cached && cached->rows() == w.predicted && cached->vocab() == base.vocab()) {
      rep.base_cache_hit = true;
      std::error_code ec;
      fs::last_write_time(rep.base_cache_file, fs::file_time_type::clock::now(), ec);  // recently used
      return std::move(*cached);
    }
  }
  BaseLogProbs out(w.predicted, base.vocab());
  for_each_window_logprobs(base, toks, w, [&](std::size_t, std::int64_t row0, const float* lp, std::int64_t rows) {
    for (std::int64_t i = 0; i < rows; ++i)
      out.set_row(row0 + i, lp + i * base.vocab(), targets[static_cast<std::size_t>(row0 + i)]);
    tick();
  });
  if (!key.empty()) {
    // The cache only saves time: a full disk or a read-only home must not fail the evaluation.
    try {
      fs::create_directories(o.base_cache_dir);
      prune_base_logprobs(o.base_cache_dir, o.base_cache_max_bytes > out.bytes() ? o.base_cache_max_bytes - out.bytes() : 0);
      out.save(rep.base_cache_file, key);
    } catch (const std::exception& e) {
      fmt::print(stderr, "warning: base log-probabilities not cached: {}\n", e.what());
      rep.base_cache_file.clear();
    }
  }
  return out;
}

}  // namespace

Windows windows(std::int64_t n, std::int64_t context) {
  Windows w;
  for (std::int64_t b = 0; b + 1 < n; b += context) {
    std::int64_t e = std::min(n, b + context);
    w.spans.push_back({b, e});
    w.predicted += e - b - 1;
  }
  return w;
}

void for_each_window_logprobs(CausalLM& m, const std::vector<std::int32_t>& toks, const Windows& w,
                              const std::function<void(std::size_t, std::int64_t, const float*, std::int64_t)>& fn) {
  const std::int64_t V = m.vocab();
  std::int64_t row = 0;
  for (std::size_t wi = 0; wi < w.spans.size(); ++wi) {
    auto [b, e] = w.spans[wi];
    m.reset();
    auto logits = m.forward(std::span(toks).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(e - b)));
    const std::int64_t rows = e - b - 1;  // the last position predicts past the window
    for (std::int64_t t = 0; t < rows; ++t) log_softmax_inplace(logits.data() + t * V, V);
    fn(wi, row, logits.data(), rows);
    row += rows;
  }
}

std::vector<float> text_logprobs(CausalLM& m, const std::vector<std::int32_t>& toks, const Windows& w,
                                 double& nll_sum, const std::function<void(std::uint64_t)>& tick) {
  const std::int64_t V = m.vocab();
  std::vector<float> out(static_cast<std::size_t>(w.predicted * V));
  nll_sum = 0;
  for_each_window_logprobs(m, toks, w, [&](std::size_t wi, std::int64_t row, const float* lp, std::int64_t rows) {
    const std::int64_t b = w.spans[wi].first;
    std::copy_n(lp, rows * V, out.data() + row * V);
    for (std::int64_t t = 0; t < rows; ++t) nll_sum -= lp[t * V + toks[static_cast<std::size_t>(b + t + 1)]];
    tick(wi + 1);
  });
  return out;
}

namespace {

// One evaluation: the text's windows, the base's log-probabilities, then each
// quantized model scored against them (and drafting for the base on the
// prompts), with the progress counted in windows and prompts.
class Evaluation {
 public:
  Evaluation(const std::string& base_path, const std::vector<std::string>& quantized, const EvalOptions& o)
      : base_path_(base_path), quantized_(quantized), o_(o), tok_(checked_tokenizer(base_path, o)) {
    rep_.options = o;
  }

  EvalReport run(const std::string& text, const std::string& text_source, const std::vector<std::string>& prompts,
                 const std::string& prompts_source) {
    rep_.text_source = text_source;
    rep_.prompts_source = prompts_source;
    tokenize_text(text, text_source);
    ptoks_ = prompt_tokens(tok_, prompts, o_.chat_template, stop_);
    total_units_ = (1 + quantized_.size()) * w_.spans.size() + quantized_.size() * ptoks_.size();
    score_base();
    for (const auto& qpath : quantized_) rep_.quantized.push_back(score_model(qpath));
    for (std::size_t a = 0; a < rep_.quantized.size(); ++a)
      for (std::size_t b = a + 1; b < rep_.quantized.size(); ++b) {
        const auto& qa = rep_.quantized[a];
        const auto& qb = rep_.quantized[b];
        rep_.paired.push_back(
            {a, b, paired_difference(qa.window_sums, qb.window_sums, qa.prompt_sums, qb.prompt_sums, rep_.bootstrap)});
      }
    return std::move(rep_);
  }

 private:
  // The options and the base's architecture are checked before the tokenizer is read.
  static Tokenizer checked_tokenizer(const std::string& base_path, const EvalOptions& o) {
    if (o.context < 2) throw_bad_input(fmt::format("a context of {} tokens: it must be at least 2", o.context));
    if (o.draft_k < 1) throw_bad_input(fmt::format("{} draft tokens per verification step: at least 1", o.draft_k));
    return tokenizer_of(base_path);
  }

  void progress(const std::string& stage) const {
    if (o_.on_progress) o_.on_progress(stage, done_units_, total_units_);
  }

  // The text's tokens (at most max_tokens), its windows and the token each
  // scored row predicts, in text_logprobs' row order.
  void tokenize_text(const std::string& text, const std::string& text_source) {
    toks_ = tok_.encode(text);
    if (o_.max_tokens > 0 && static_cast<std::int64_t>(toks_.size()) > o_.max_tokens)
      toks_.resize(static_cast<std::size_t>(o_.max_tokens));
    rep_.text_tokens = static_cast<std::int64_t>(toks_.size());
    rep_.text_bytes = covered_bytes(tok_, toks_, text.size());
    const std::string_view evaluated = std::string_view(text).substr(0, rep_.text_bytes);
    // A quantized model whose static scales were calibrated on the text it is
    // evaluated on would look better than it is.
    for (const auto& q : quantized_)
      if (auto cal = manifest_calibration(q)) require_disjoint(evaluated, text_source, *cal, q);
    if (toks_.size() < 2) throw_bad_input(fmt::format("{}: fewer than 2 tokens to evaluate", text_source));
    w_ = windows(rep_.text_tokens, o_.context);
    for (auto [b, e] : w_.spans) {
      window_sizes_.push_back(e - b - 1);
      for (std::int64_t t = b + 1; t < e; ++t) targets_.push_back(toks_[static_cast<std::size_t>(t)]);
    }
  }

  void score_base() {
    const auto t0 = std::chrono::steady_clock::now();
    base_ = load_model(base_path_);
    V_ = base_->vocab();
    rep_.base.path = base_path_;
    rep_.base.dialect = base_->dialect();
    rep_.base.stored_bytes = stored_bytes(base_path_);
    rep_.base.linear_bits_per_weight = base_->linear_bits_per_weight();
    base_lp_ = base_logprobs(*base_, base_path_, toks_, targets_, w_, o_, rep_, [&] {
      ++done_units_;
      progress("base");
    });
    double nll = 0;
    for (std::int64_t r = 0; r < w_.predicted; ++r) nll -= base_lp_.target_logp(r);
    if (rep_.base_cache_hit) {
      done_units_ += w_.spans.size();
      progress("base (cached)");
    }
    rep_.base.tokens = w_.predicted;
    rep_.base.nll = nll / static_cast<double>(w_.predicted);
    rep_.base.perplexity = std::exp(rep_.base.nll);
    rep_.base.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Every scored position of m against the base, window by window: memory
  // holds the base's rows and one window of this model's.
  std::vector<PositionScore> score_positions(CausalLM& m, const std::string& label, double& qnll) {
    std::vector<PositionScore> scores(static_cast<std::size_t>(w_.predicted));
    std::vector<float> p(static_cast<std::size_t>(V_));
    qnll = 0;
    for_each_window_logprobs(m, toks_, w_, [&](std::size_t, std::int64_t row0, const float* lp, std::int64_t rows) {
      for (std::int64_t i = 0; i < rows; ++i) {
        const std::int64_t r = row0 + i;
        const float* q = lp + i * V_;
        const std::int32_t t = targets_[static_cast<std::size_t>(r)];
        base_lp_.decode_row(r, p.data());
        qnll -= q[t];
        scores[static_cast<std::size_t>(r)] = {kl_divergence(p.data(), q, V_), -static_cast<double>(q[t]),
                                               -static_cast<double>(base_lp_.target_logp(r)),
                                               base_lp_.top(r) == argmax(q, V_)};
      }
      ++done_units_;
      progress(label);
    });
    return scores;
  }

  // m drafting for the base on every prompt.
  void score_acceptance(CausalLM& m, const std::string& label, ModelQuality& mq) {
    const SpecOptions so{o_.draft_k, o_.gen_tokens, o_.prompt_batch};
    const auto stats = speculate_prompts(*base_, m, ptoks_, stop_, so, [&](std::size_t n) {
      done_units_ += n;
      progress(label + " draft");
    });
    SpecStats st;
    for (const SpecStats& one : stats) {
      mq.prompt_sums.push_back({one.steps, one.greedy, one.expected});
      st.steps += one.steps;
      st.greedy += one.greedy;
      st.expected += one.expected;
    }
    mq.acceptance_ci = acceptance_intervals(mq.prompt_sums, rep_.bootstrap);
    mq.steps = st.steps;
    if (st.steps) {
      mq.accepted_greedy = st.greedy / static_cast<double>(st.steps);
      mq.accepted_expected = st.expected / static_cast<double>(st.steps);
    }
  }

  ModelQuality score_model(const std::string& qpath) {
    const auto t1 = std::chrono::steady_clock::now();
    ModelQuality mq;
    mq.path = qpath;
    auto m = load_model(qpath);
    if (m->vocab() != V_)
      throw_bad_input(fmt::format("{} has vocabulary {}, base {} has {}", qpath, m->vocab(), base_path_, V_));
    mq.dialect = m->dialect();
    mq.stored_bytes = stored_bytes(qpath);
    mq.linear_bits_per_weight = m->linear_bits_per_weight();
    const std::string label = fs::path(qpath).filename().string();
    double qnll = 0;
    const std::vector<PositionScore> scores = score_positions(*m, label, qnll);
    mq.tokens = w_.predicted;
    mq.nll = qnll / static_cast<double>(w_.predicted);
    mq.perplexity = std::exp(mq.nll);
    mq.stats = kl_statistics(scores);
    mq.kl_histogram = kl_histogram(scores);
    mq.kl_mean = mq.stats.kld.mean;
    mq.kl_p99 = mq.stats.kld.percentile(0.99);
    mq.top1 = mq.stats.same_top;
    mq.window_sums = window_sums(scores, window_sizes_);
    mq.text_ci = text_intervals(mq.window_sums, rep_.bootstrap);
    mq.text_ci.kl_p99 = kl_percentile_interval(scores, window_sizes_, 0.99, rep_.bootstrap);
    score_acceptance(*m, label, mq);
    mq.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    return mq;
  }

  const std::string& base_path_;
  const std::vector<std::string>& quantized_;
  const EvalOptions& o_;
  const Tokenizer tok_;
  EvalReport rep_;
  std::vector<std::int32_t> toks_;
  Windows w_;
  std::vector<std::int32_t> targets_;
  std::vector<std::int64_t> window_sizes_;
  std::set<std::int32_t> stop_;
  std::vector<std::vector<std::int32_t>> ptoks_;
  std::uint64_t total_units_{0}, done_units_{0};
  std::unique_ptr<CausalLM> base_;
  std::int64_t V_{0};
  BaseLogProbs base_lp_;
};

}  // namespace

EvalReport evaluate(const std::string& base_path, const std::vector<std::string>& quantized,
                    const std::string& text, const std::string& text_source,
                    const std::vector<std::string>& prompts, const std::string& prompts_source,
                    const EvalOptions& o) {
  return Evaluation(base_path, quantized, o).run(text, text_source, prompts, prompts_source);
}

}  // namespace selq::runtime
