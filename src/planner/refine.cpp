#include "planner/refine.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <map>
#include <cstdlib>
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
  AppliedMix(const MixPlanner& planner, runtime::CausalLM& model, const InputAmax& input_amax)
      : planner_(planner),
        model_(model),
        input_amax_(input_amax),
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
    if (c.spec) saved_[u] = swap_in_candidate(planner_.layout(), unit, c, model_, input_amax_);
    option_[u] = option;
  }

 private:
  const MixPlanner& planner_;
  runtime::CausalLM& model_;
  const InputAmax& input_amax_;
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

}  // namespace

RefineResult refine_mix(const MixPlanner& planner, const Mix& start, std::uint64_t unit_budget,
                        runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                        const RefineOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.evaluations < 0) throw_bad_input("refinement needs a number of evaluations >= 0");
  if (tokens.empty()) throw_bad_input("refinement needs calibration tokens");
  RefineResult r;
  r.start = start;
  auto pick = planner.pick_of(start);
  std::uint64_t used = start.linear_bytes - planner.layout().fixed_bytes;
  if (used > unit_budget) throw_unsupported("planner bug: the mix to refine is over its budget");

  const std::int64_t vocab = model.vocab();
  const auto base = calibration_logprobs(model, tokens, options.context);
  r.positions = static_cast<std::int64_t>(base.size()) / vocab;
  AppliedMix applied(planner, model, options.input_amax);
  auto measure = [&] {
    const Divergence d = mean_divergence(base, calibration_logprobs(model, tokens, options.context), vocab);
    return options.acceptance ? d.tv : d.kl;
  };
  for (std::size_t u = 0; u < pick.size(); ++u) applied.set(u, pick[u]);
  r.start_loss = r.loss = measure();

  std::set<std::vector<std::size_t>> tried = {pick};
  // How often each change (unit, option) was part of a move that did not help:
  // moves made of changes that failed less often go first, so that a few
  // promising-looking units do not take every evaluation.
  std::map<std::pair<std::size_t, std::size_t>, int> failures;
  auto failed = [&](const Change& c) {
    if (c.unit == kNone) return 0;
    const auto it = failures.find({c.unit, c.option});
    return it == failures.end() ? 0 : it->second;
  };
  int done = 0;
  if (options.on_progress) options.on_progress(done, options.evaluations, r.loss);
  while (done < options.evaluations) {
    bool kept = false, exhausted = true, skipped = false;
    auto moves = ranked_moves(planner, pick, used, unit_budget, options.width);
    std::stable_sort(moves.begin(), moves.end(), [&](const Move& a, const Move& b) {
      return failed(a.up) + failed(a.down) < failed(b.up) + failed(b.down);
    });
    // Within a round each change is tried once: a move that failed says little
    // for the same raise with another lower, and trying other units first
    // spreads the evaluations.
    std::set<std::pair<std::size_t, std::size_t>> used_changes;
    for (const Move& m : moves) {
      auto next = pick;
      next[m.up.unit] = m.up.option;
      if (m.down.unit != kNone) next[m.down.unit] = m.down.option;
      if (tried.count(next)) continue;
      if (used_changes.count({m.up.unit, m.up.option}) ||
          (m.down.unit != kNone && used_changes.count({m.down.unit, m.down.option}))) {
        skipped = true;
        continue;
      }
      tried.insert(next);
      used_changes.insert({m.up.unit, m.up.option});
      if (m.down.unit != kNone) used_changes.insert({m.down.unit, m.down.option});
      RefineStep step{change_text(planner, pick, m.up), m.down.unit != kNone ? change_text(planner, pick, m.down) : "",
                      0, false};
      applied.set(m.up.unit, m.up.option);
      if (m.down.unit != kNone) applied.set(m.down.unit, m.down.option);
      step.loss = measure();
      ++done;
      if (step.loss < r.loss) {
        step.kept = kept = true;
        r.loss = step.loss;
        used = static_cast<std::uint64_t>(static_cast<std::int64_t>(used) + m.up.byte_delta +
                                          (m.down.unit != kNone ? m.down.byte_delta : 0));
        pick = std::move(next);
      } else {
        applied.set(m.up.unit, pick[m.up.unit]);
        if (m.down.unit != kNone) applied.set(m.down.unit, pick[m.down.unit]);
        ++failures[{m.up.unit, m.up.option}];
        if (m.down.unit != kNone) ++failures[{m.down.unit, m.down.option}];
      }
      r.steps.push_back(std::move(step));
      if (options.on_progress) options.on_progress(done, options.evaluations, r.loss);
      if (kept || done >= options.evaluations) {
        exhausted = false;
        break;
      }
    }
    if (exhausted && !skipped) {  // every move of the neighbourhood was measured
      r.converged = true;
      break;
    }
  }
  r.mix = planner.make_mix(pick);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
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
