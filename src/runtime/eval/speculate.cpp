// Speculative acceptance in lockstep batches (speculate.h).
#include "runtime/eval/speculate.h"

#include <algorithm>
#include <span>

#include "runtime/eval/eval.h"
#include "runtime/model/numerics.h"

namespace selq::runtime {
namespace {

using Step = CausalLM::SequenceStep;

// One prompt's decoding: the token to run next, the current draft and its
// log-probabilities, and what it has accumulated.
struct Sequence {
  std::int32_t last{0};
  std::int64_t generated{0};
  bool done{false};
  std::vector<std::int32_t> draft;  // k tokens
  std::vector<float> qlog;          // [k, vocab] the draft's log-probabilities
  std::vector<std::int32_t> verify;  // last + draft
  SpecStats stats;
};

class Batch {
 public:
  Batch(CausalLM& base, CausalLM& draft, const std::set<std::int32_t>& stop, const SpecOptions& o)
      : base_(base), draft_(draft), stop_(stop), o_(o), V_(base.vocab()) {}

  std::vector<SpecStats> run(std::span<const std::vector<std::int32_t>> prompts) {
    const int n = static_cast<int>(prompts.size());
    base_.reset_slots(n);
    draft_.reset_slots(n);
    seqs_.assign(prompts.size(), Sequence{});
    for (int i = 0; i < n; ++i) prefill(i, prompts[static_cast<std::size_t>(i)]);
    const std::int64_t limit = std::min(base_.max_positions(), draft_.max_positions()) - o_.draft_k - 2;
    for (;;) {
      std::vector<int> active;
      for (int i = 0; i < n; ++i) {
        Sequence& s = seqs_[static_cast<std::size_t>(i)];
        if (!s.done && s.generated < o_.gen_tokens && base_.cached(i) < limit) active.push_back(i);
      }
      if (active.empty()) break;
      step(active);
    }
    std::vector<SpecStats> out;
    for (const Sequence& s : seqs_) out.push_back(s.stats);
    return out;
  }

 private:
  // The prompt but its last token through both models, one prompt per call
  // (the same products as for this prompt alone).
  void prefill(int i, const std::vector<std::int32_t>& prompt) {
    Sequence& s = seqs_[static_cast<std::size_t>(i)];
    if (prompt.size() < 2) {
      s.done = true;
      return;
    }
    const Step head{i, std::span(prompt).first(prompt.size() - 1), false};
    base_.forward_steps(std::span(&head, 1), false);
    draft_.forward_steps(std::span(&head, 1), false);
    s.last = prompt.back();
    s.draft.resize(static_cast<std::size_t>(o_.draft_k));
    s.qlog.resize(static_cast<std::size_t>(o_.draft_k * V_));
  }

  // k draft tokens for every active prompt, the base's verification of each,
  // and both caches rolled back to what was accepted.
  void step(const std::vector<int>& active) {
    const int k = o_.draft_k;
    std::vector<std::int64_t> n0;
    std::vector<std::int32_t> cur;
    for (int i : active) {
      n0.push_back(base_.cached(i));
      cur.push_back(seqs_[static_cast<std::size_t>(i)].last);
    }
    std::vector<Step> steps(active.size());
    for (int j = 0; j < k; ++j) {
      for (std::size_t a = 0; a < active.size(); ++a) steps[a] = {active[a], std::span(&cur[a], 1), false};
      auto logits = draft_.forward_steps(steps, true);
      for (std::size_t a = 0; a < active.size(); ++a) {
        Sequence& s = seqs_[static_cast<std::size_t>(active[a])];
        float* q = s.qlog.data() + j * V_;
        std::copy(logits[a].begin(), logits[a].end(), q);
        log_softmax_inplace(q, V_);
        s.draft[static_cast<std::size_t>(j)] = cur[a] = argmax(q, V_);
      }
    }
    for (std::size_t a = 0; a < active.size(); ++a) {
      Sequence& s = seqs_[static_cast<std::size_t>(active[a])];
      s.verify.assign(1, s.last);
      s.verify.insert(s.verify.end(), s.draft.begin(), s.draft.end());
      steps[a] = {active[a], s.verify, true};
    }
    auto p = base_.forward_steps(steps, true);  // k+1 rows each
    std::vector<Step> catch_up;  // the draft's last token, where all k were accepted
    for (std::size_t a = 0; a < active.size(); ++a) {
      const int i = active[a];
      const std::int64_t kept = n0[a] + 1 + accept(seqs_[static_cast<std::size_t>(i)], p[a].data());
      base_.truncate(kept, i);
      if (draft_.cached(i) > kept)
        draft_.truncate(kept, i);
      else if (draft_.cached(i) < kept)  // all k accepted: the draft never saw its last token
        catch_up.push_back({i, std::span(&seqs_[static_cast<std::size_t>(i)].draft[static_cast<std::size_t>(k - 1)], 1), false});
    }
    if (!catch_up.empty()) draft_.forward_steps(catch_up, true);
  }

  // The greedy verification of s's draft against the base's rows p [k+1, V]:
  // the tokens accepted; the statistics and the next token recorded in s.
  int accept(Sequence& s, float* p) {
    const int k = o_.draft_k;
    int a = 0;
    std::vector<double> alpha;
    for (int j = 0; j < k; ++j) {
      float* pj = p + j * V_;
      log_softmax_inplace(pj, V_);
      alpha.push_back(overlap_probability(pj, s.qlog.data() + j * V_, V_));
      if (a == j && argmax(pj, V_) == s.draft[static_cast<std::size_t>(j)]) ++a;
    }
    const std::int32_t next = argmax(p + static_cast<std::int64_t>(a) * V_, V_);
    ++s.stats.steps;
    s.stats.greedy += a;
    s.stats.expected += expected_accepted(alpha);
    s.generated += a + 1;
    bool stopped = stop_.count(next) > 0;
    for (int j = 0; j < a; ++j) stopped = stopped || stop_.count(s.draft[static_cast<std::size_t>(j)]) > 0;
    s.last = next;
    s.done = stopped;
    return a;
  }

  CausalLM& base_;
  CausalLM& draft_;
  const std::set<std::int32_t>& stop_;
  const SpecOptions& o_;
  const std::int64_t V_;
  std::vector<Sequence> seqs_;
};

}  // namespace

std::vector<SpecStats> speculate_prompts(CausalLM& base, CausalLM& draft,
                                         const std::vector<std::vector<std::int32_t>>& prompts,
                                         const std::set<std::int32_t>& stop, const SpecOptions& o,
                                         const std::function<void(std::size_t)>& done) {
  const auto batch = static_cast<std::size_t>(std::max(1, std::min({o.batch, base.max_slots(), draft.max_slots()})));
  std::vector<SpecStats> out;
  Batch runner(base, draft, stop, o);
  for (std::size_t b0 = 0; b0 < prompts.size(); b0 += batch) {
    const std::size_t n = std::min(batch, prompts.size() - b0);
    auto part = runner.run(std::span(prompts).subspan(b0, n));
    out.insert(out.end(), part.begin(), part.end());
    if (done) done(n);
  }
  return out;
}

}  // namespace selq::runtime
