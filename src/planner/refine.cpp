#include "planner/refine.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"
#include "planner/runtime_tiers.h"

namespace selq::planner {
namespace {

constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();

// The model with a mix applied: each unit holds its option's quantized
// weights; the destructor puts the source weights back.
class AppliedMix {
 public:
  AppliedMix(const MixPlanner& planner, runtime::CausalLM& model, const InputAmax& input_amax,
             RoundingInputs& rounding)
      : planner_(planner),
        model_(model),
        input_amax_(input_amax),
        rounding_(rounding),
        saved_(planner.layout().units.size()),
        option_(planner.layout().units.size(), kNone) {}
  AppliedMix(const AppliedMix&) = delete;
  AppliedMix& operator=(const AppliedMix&) = delete;
  ~AppliedMix() {
    for (std::size_t u = 0; u < saved_.size(); ++u)
      if (!saved_[u].empty()) swap_back(planner_.layout().units[u], std::move(saved_[u]), model_);
  }

  void set(std::size_t u, std::size_t option) {
    if (option_[u] == option) return;
    const auto& unit = planner_.layout().units[u];
    // Quantize from the source weights, never from another option's.
    if (!saved_[u].empty()) swap_back(unit, std::move(saved_[u]), model_);
    saved_[u].clear();
    const Candidate& c = planner_.candidate_of(u, option);
    if (c.spec) saved_[u] = swap_in_candidate(planner_.layout(), unit, c, model_, input_amax_, &rounding_);
    option_[u] = option;
  }

 private:
  const MixPlanner& planner_;
  runtime::CausalLM& model_;
  const InputAmax& input_amax_;
  RoundingInputs& rounding_;
  std::vector<std::vector<runtime::Linear>> saved_;  // per unit: the source linears while quantized
  std::vector<std::size_t> option_;
};

// One unit's change of option, with its predicted score change and byte change.
struct Change {
  std::size_t unit{0}, option{0};
  double score_delta{0};
  std::int64_t byte_delta{0};
};

struct Move {
  Change up, down;  // down.unit == kNone: a raise the slack pays for alone
  double predicted{0};
};

// The `width` raises with the most predicted gain per byte and the `width`
// lowers with the least predicted loss per byte saved, paired within the
// budget, cheapest predicted first.
std::vector<Move> ranked_moves(const MixPlanner& planner, const std::vector<std::size_t>& pick, std::uint64_t used,
                               std::uint64_t budget, std::size_t width) {
  std::vector<Change> raises, lowers;
  for (std::size_t u = 0; u < pick.size(); ++u) {
    const auto& opts = planner.options(u);
    const Option& cur = opts[pick[u]];
    for (std::size_t o = 0; o < opts.size(); ++o) {
      const Change c{u, o, opts[o].score - cur.score,
                     static_cast<std::int64_t>(opts[o].cost) - static_cast<std::int64_t>(cur.cost)};
      if (c.byte_delta > 0 && c.score_delta < 0) raises.push_back(c);
      if (c.byte_delta < 0) lowers.push_back(c);
    }
  }
  auto per_byte = [](const Change& c) { return c.score_delta / static_cast<double>(std::abs(c.byte_delta)); };
  auto by_per_byte = [&](const Change& a, const Change& b) {
    const double x = per_byte(a), y = per_byte(b);
    if (x != y) return x < y;
    return std::tie(a.unit, a.option) < std::tie(b.unit, b.option);
  };
  std::sort(raises.begin(), raises.end(), by_per_byte);
  std::sort(lowers.begin(), lowers.end(), by_per_byte);
  raises.resize(std::min(raises.size(), width));
  lowers.resize(std::min(lowers.size(), width));

  const auto slack = static_cast<std::int64_t>(budget) - static_cast<std::int64_t>(used);
  std::vector<Move> moves;
  for (const auto& r : raises) {
    if (r.byte_delta <= slack) moves.push_back({r, {kNone, 0, 0, 0}, r.score_delta});
    for (const auto& l : lowers)
      if (l.unit != r.unit && r.byte_delta + l.byte_delta <= slack)
        moves.push_back({r, l, r.score_delta + l.score_delta});
  }
  std::stable_sort(moves.begin(), moves.end(), [](const Move& a, const Move& b) { return a.predicted < b.predicted; });
  return moves;
}

std::string change_text(const MixPlanner& planner, const std::vector<std::size_t>& pick, const Change& c) {
  return fmt::format("{}: {} -> {}", planner.layout().units[c.unit].name, planner.candidate_of(c.unit, pick[c.unit]).id,
                     planner.candidate_of(c.unit, c.option).id);
}


// The local search: moves of one unit up and (to stay in budget) one down,
// most promising first, each measured end to end and kept when it lowers the
// loss.
class LocalSearch {
 public:
  LocalSearch(const MixPlanner& planner, const Mix& start, std::uint64_t unit_budget, runtime::CausalLM& model,
              const std::vector<std::int32_t>& tokens, const RefineOptions& options)
      : t0_(std::chrono::steady_clock::now()), planner_(planner), unit_budget_(unit_budget), model_(model),
        tokens_(tokens), options_(options),
        rounding_(model, options.rounding_tokens.empty() ? tokens : options.rounding_tokens, options.context) {
    r_.start = start;
    pick_ = planner.pick_of(start);
    used_ = start.linear_bytes - planner.layout().fixed_bytes;
    if (used_ > unit_budget) throw_unsupported("planner bug: the mix to refine is over its budget");
    // Before any unit is swapped: the base, and every +weighted and +gptq
    // option (what they round with is the source model's).
    base_ = calibration_logprobs(model, tokens, options.context);
    r_.positions = static_cast<std::int64_t>(base_.size()) / model.vocab();
    rounding_.keep_rounded = true;
    round_calibrated_options();
    applied_.emplace(planner, model, options.input_amax, rounding_);
  }

  RefineResult run() {
    for (std::size_t u = 0; u < pick_.size(); ++u) applied_->set(u, pick_[u]);
    r_.start_loss = r_.loss = measure();
    tried_ = {pick_};
    if (options_.on_progress) options_.on_progress(done_, options_.evaluations, r_.loss);
    while (done_ < options_.evaluations)
      if (round()) {  // every move of the neighbourhood was measured
        r_.converged = true;
        break;
      }
    r_.mix = planner_.make_mix(pick_);
    r_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return std::move(r_);
  }

 private:
  void round_calibrated_options() {
    const auto& units = planner_.layout().units;
    for (std::size_t u = 0; u < units.size(); ++u)
      for (std::size_t o = 0; o < planner_.options(u).size(); ++o) {
        const Candidate& c = planner_.candidate_of(u, o);
        if (c.rounds_with_calibration()) quantized_unit_weights(planner_.layout(), units[u], c, model_, &rounding_);
      }
  }

  double measure() {
    const Divergence d = mean_divergence(base_, calibration_logprobs(model_, tokens_, options_.context), model_.vocab());
    return options_.acceptance ? d.tv : d.kl;
  }

  // How often each change (unit, option) was part of a move that did not help:
  // moves made of changes that failed less often go first, so that a few
  // promising-looking units do not take every evaluation.
  int failed(const Change& c) const {
    if (c.unit == kNone) return 0;
    const auto it = failures_.find({c.unit, c.option});
    return it == failures_.end() ? 0 : it->second;
  }

  // One pass over the ranked moves, until one is kept or the evaluations run
  // out; true when every move was measured. Within a round each change is
  // tried once: a move that failed says little for the same raise with
  // another lower, and trying other units first spreads the evaluations.
  bool round() {
    auto moves = ranked_moves(planner_, pick_, used_, unit_budget_, options_.width);
    std::stable_sort(moves.begin(), moves.end(), [&](const Move& a, const Move& b) {
      return failed(a.up) + failed(a.down) < failed(b.up) + failed(b.down);
    });
    std::set<std::pair<std::size_t, std::size_t>> used_changes;
    bool skipped = false;
    for (const Move& m : moves) {
      auto next = pick_;
      next[m.up.unit] = m.up.option;
      if (m.down.unit != kNone) next[m.down.unit] = m.down.option;
      if (tried_.count(next)) continue;
      if (used_changes.count({m.up.unit, m.up.option}) ||
          (m.down.unit != kNone && used_changes.count({m.down.unit, m.down.option}))) {
        skipped = true;
        continue;
      }
      tried_.insert(next);
      used_changes.insert({m.up.unit, m.up.option});
      if (m.down.unit != kNone) used_changes.insert({m.down.unit, m.down.option});
      if (try_move(m, std::move(next)) || done_ >= options_.evaluations) return false;
    }
    return !skipped;
  }

  // Measures the mix with move m applied; keeps it (true) when the loss is
  // lower, else puts the units back and counts the failure.
  bool try_move(const Move& m, std::vector<std::size_t> next) {
    const bool down = m.down.unit != kNone;
    RefineStep step{change_text(planner_, pick_, m.up), down ? change_text(planner_, pick_, m.down) : "", 0, false};
    applied_->set(m.up.unit, m.up.option);
    if (down) applied_->set(m.down.unit, m.down.option);
    step.loss = measure();
    ++done_;
    if (step.loss < r_.loss) {
      step.kept = true;
      r_.loss = step.loss;
      used_ = static_cast<std::uint64_t>(static_cast<std::int64_t>(used_) + m.up.byte_delta +
                                         (down ? m.down.byte_delta : 0));
      pick_ = std::move(next);
    } else {
      applied_->set(m.up.unit, pick_[m.up.unit]);
      if (down) applied_->set(m.down.unit, pick_[m.down.unit]);
      ++failures_[{m.up.unit, m.up.option}];
      if (down) ++failures_[{m.down.unit, m.down.option}];
    }
    const bool kept = step.kept;
    r_.steps.push_back(std::move(step));
    if (options_.on_progress) options_.on_progress(done_, options_.evaluations, r_.loss);
    return kept;
  }

  const std::chrono::steady_clock::time_point t0_;
  const MixPlanner& planner_;
  const std::uint64_t unit_budget_;
  runtime::CausalLM& model_;
  const std::vector<std::int32_t>& tokens_;
  const RefineOptions& options_;
  RoundingInputs rounding_;
  std::optional<AppliedMix> applied_;
  RefineResult r_;
  std::vector<std::size_t> pick_;
  std::uint64_t used_{0};
  std::vector<float> base_;
  std::set<std::vector<std::size_t>> tried_;
  std::map<std::pair<std::size_t, std::size_t>, int> failures_;
  int done_{0};
};

}  // namespace

RefineResult refine_mix(const MixPlanner& planner, const Mix& start, std::uint64_t unit_budget,
                        runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                        const RefineOptions& options) {
  if (options.evaluations < 0) throw_bad_input("refinement needs a number of evaluations >= 0");
  if (tokens.empty()) throw_bad_input("refinement needs calibration tokens");
  return LocalSearch(planner, start, unit_budget, model, tokens, options).run();
}

nlohmann::json RefineResult::to_json(const UnitLayout& layout) const {
  nlohmann::json steps_json = nlohmann::json::array();
  for (const auto& s : steps) {
    nlohmann::json j = {{"raised", s.raised}, {"loss", s.loss}, {"kept", s.kept}};
    if (!s.lowered.empty()) j["lowered"] = s.lowered;
    steps_json.push_back(std::move(j));
  }
  return {{"evaluations", steps.size()},
          {"kept", std::count_if(steps.begin(), steps.end(), [](const RefineStep& s) { return s.kept; })},
          {"start_loss", start_loss},
          {"loss", loss},
          {"converged", converged},
          {"positions", positions},
          {"seconds", seconds},
          {"start", start.to_json(layout)},
          {"steps", std::move(steps_json)}};
}

}  // namespace selq::planner
