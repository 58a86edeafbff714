#include "planner/solver.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::planner {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

// The cheapest option, the lowest score among equals: where a unit's hull starts.
std::size_t cheapest_option(const std::vector<Option>& opts) {
  std::size_t c = 0;
  for (std::size_t o = 1; o < opts.size(); ++o)
    if (opts[o].cost < opts[c].cost || (opts[o].cost == opts[c].cost && opts[o].score < opts[c].score)) c = o;
  return c;
}

// Each unit's lower convex hull from its cheapest option, as steps sorted by
// score gained per byte (the order in which the LP relaxation buys them).
// Within a unit the slopes rise along the hull, so its steps stay in order.
std::vector<HullStep> hull_steps(const std::vector<std::vector<Option>>& units) {
  std::vector<HullStep> steps;
  std::vector<std::size_t> order, hull;
  for (std::size_t u = 0; u < units.size(); ++u) {
    const auto& opts = units[u];
    order.resize(opts.size());
    for (std::size_t o = 0; o < opts.size(); ++o) order[o] = o;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return opts[a].cost != opts[b].cost ? opts[a].cost < opts[b].cost
                                          : (opts[a].score != opts[b].score ? opts[a].score < opts[b].score : a < b);
    });
    hull.clear();
    for (std::size_t o : order) {
      if (!hull.empty() && opts[o].score >= opts[hull.back()].score) continue;  // dominated
      // Pop the last point while it lies on or above the chord from its predecessor to o.
      while (hull.size() >= 2) {
        const Option& a = opts[hull[hull.size() - 2]];
        const Option& b = opts[hull.back()];
        const double cross = (b.score - a.score) * static_cast<double>(opts[o].cost - a.cost) -
                             (opts[o].score - a.score) * static_cast<double>(b.cost - a.cost);
        if (cross < 0) break;
        hull.pop_back();
      }
      hull.push_back(o);
    }
    for (std::size_t i = 1; i < hull.size(); ++i)
      steps.push_back({u, hull[i - 1], hull[i], opts[hull[i]].cost - opts[hull[i - 1]].cost,
                       opts[hull[i]].score - opts[hull[i - 1]].score});
  }
  auto slope = [](const HullStep& s) { return s.score / static_cast<double>(std::max<std::uint64_t>(s.cost, 1)); };
  std::stable_sort(steps.begin(), steps.end(), [&](const HullStep& a, const HullStep& b) { return slope(a) < slope(b); });
  return steps;
}
}  // namespace

KnapsackSolver::KnapsackSolver(std::vector<std::vector<Option>> units, std::uint64_t max_budget,
                               std::size_t max_buckets)
    : units_(std::move(units)) {
  std::size_t total_options = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto& opts = units_[u];
    if (opts.empty()) throw_bad_input(fmt::format("planner: unit {} has no candidate format", u));
    if (opts.size() > 255) throw_bad_input("planner: more than 255 candidates for one unit");
    const std::size_t c = cheapest_option(opts);
    cheapest_.push_back(c);
    min_total_ += opts[c].cost;
    total_options += opts.size();
  }
  const std::uint64_t slack = max_budget > min_total_ ? max_budget - min_total_ : 0;
  if (max_buckets == 0) {
    const double steps = 5e7 / static_cast<double>(std::max<std::size_t>(total_options, 1));
    max_buckets = static_cast<std::size_t>(std::clamp(steps, 256.0, 1048576.0));
  }
  buckets_ = static_cast<std::size_t>(std::min<std::uint64_t>(slack, max_buckets));
  bucket_ = buckets_ == 0 ? 1 : (slack + buckets_ - 1) / buckets_;
  if (bucket_ == 0) bucket_ = 1;

  for (std::size_t u = 0; u < units_.size(); ++u) {
    first_option_.push_back(rounded_extra_.size());
    const std::uint64_t base = units_[u][cheapest_[u]].cost;
    for (const auto& o : units_[u]) {
      const std::uint64_t extra = o.cost - std::min(o.cost, base);
      const std::uint64_t r = (extra + bucket_ - 1) / bucket_;
      rounded_extra_.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(r, buckets_ + 1)));
    }
  }

  // best[b]: minimal score of the units so far with rounded extra cost <= b.
  const std::size_t width = buckets_ + 1;
  std::vector<double> best(width, 0.0), next(width);
  choice_.assign(units_.size() * width, 0);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    std::fill(next.begin(), next.end(), kInf);
    std::uint8_t* ch = choice_.data() + u * width;
    for (std::size_t o = 0; o < units_[u].size(); ++o) {
      const std::size_t w = rounded_extra_[first_option_[u] + o];
      if (w > buckets_) continue;
      const double s = units_[u][o].score;
      for (std::size_t b = w; b < width; ++b) {
        const double v = best[b - w] + s;
        if (v < next[b]) {
          next[b] = v;
          ch[b] = static_cast<std::uint8_t>(o);
        }
      }
    }
    best.swap(next);
  }
  best_ = std::move(best);
  hull_steps_ = hull_steps(units_);
}

Solution KnapsackSolver::hull_greedy(std::uint64_t budget) const {
  Solution s;
  s.pick = cheapest_;
  s.cost = min_total_;
  std::vector<bool> blocked(units_.size(), false);
  for (const auto& st : hull_steps_) {
    if (blocked[st.unit] || s.pick[st.unit] != st.from) continue;
    if (s.cost + st.cost > budget) {
      blocked[st.unit] = true;  // its later steps assume this one
      continue;
    }
    s.pick[st.unit] = st.to;
    s.cost += st.cost;
  }
  for (std::size_t u = 0; u < units_.size(); ++u) s.score += units_[u][s.pick[u]].score;
  repair(s, budget);
  return s;
}

std::optional<Solution> KnapsackSolver::solve(std::uint64_t budget) const {
  if (budget < min_total_) return std::nullopt;
  const std::uint64_t slack = budget - min_total_;
  std::size_t b = static_cast<std::size_t>(std::min<std::uint64_t>(slack / bucket_, buckets_));
  const std::size_t width = buckets_ + 1;
  Solution s;
  s.pick.assign(units_.size(), 0);
  for (std::size_t u = units_.size(); u-- > 0;) {
    const std::size_t o = choice_[u * width + b];
    s.pick[u] = o;
    b -= rounded_extra_[first_option_[u] + o];
  }
  for (std::size_t u = 0; u < units_.size(); ++u) {
    s.cost += units_[u][s.pick[u]].cost;
    s.score += units_[u][s.pick[u]].score;
  }
  repair(s, budget);
  if (bucket_ > 1) {
    Solution h = hull_greedy(budget);
    if (h.score < s.score) return h;
  }
  return s;
}

// The buckets round costs up, so a solution may leave up to a bucket per unit
// unspent: spend it on the upgrades with the best score gain per byte, in
// passes over all upgrades sorted once per pass.
void KnapsackSolver::repair(Solution& s, std::uint64_t budget) const {
  struct Upgrade {
    double gain;
    std::size_t unit, option;
  };
  for (int pass = 0; pass < 8; ++pass) {
    std::vector<Upgrade> ups;
    for (std::size_t u = 0; u < units_.size(); ++u) {
      const Option& cur = units_[u][s.pick[u]];
      for (std::size_t o = 0; o < units_[u].size(); ++o) {
        const Option& alt = units_[u][o];
        if (alt.score >= cur.score || s.cost - cur.cost + alt.cost > budget) continue;
        const double extra = alt.cost > cur.cost ? static_cast<double>(alt.cost - cur.cost) : 0.0;
        ups.push_back({(cur.score - alt.score) / (extra + 1.0), u, o});
      }
    }
    if (ups.empty()) break;
    std::sort(ups.begin(), ups.end(), [](const Upgrade& a, const Upgrade& b) {
      return a.gain != b.gain ? a.gain > b.gain : (a.unit != b.unit ? a.unit < b.unit : a.option < b.option);
    });
    bool changed = false;
    for (const auto& up : ups) {
      const Option& cur = units_[up.unit][s.pick[up.unit]];
      const Option& alt = units_[up.unit][up.option];
      if (alt.score >= cur.score || s.cost - cur.cost + alt.cost > budget) continue;
      s.cost = s.cost - cur.cost + alt.cost;
      s.score = s.score - cur.score + alt.score;
      s.pick[up.unit] = up.option;
      changed = true;
    }
    if (!changed) break;
  }
  // Re-add from scratch: the incremental updates above round differently.
  s.cost = 0;
  s.score = 0;
  for (std::size_t u = 0; u < units_.size(); ++u) {
    s.cost += units_[u][s.pick[u]].cost;
    s.score += units_[u][s.pick[u]].score;
  }
}

double relaxed_lower_bound(const std::vector<std::vector<Option>>& units, std::uint64_t budget) {
  std::uint64_t cost = 0;
  double score = 0;
  for (const auto& opts : units) {
    const std::size_t c = cheapest_option(opts);
    cost += opts[c].cost;
    score += opts[c].score;
  }
  if (cost > budget) return kInf;
  for (const auto& st : hull_steps(units)) {
    const std::uint64_t left = budget - cost;
    if (st.cost > left) return score + st.score * static_cast<double>(left) / static_cast<double>(st.cost);
    cost += st.cost;
    score += st.score;
  }
  return score;
}

std::optional<Solution> brute_force(const std::vector<std::vector<Option>>& units, std::uint64_t budget) {
  std::optional<Solution> best;
  Solution cur;
  cur.pick.assign(units.size(), 0);
  auto rec = [&](auto&& self, std::size_t u) -> void {
    if (cur.cost > budget) return;
    if (u == units.size()) {
      Solution s = cur;
      s.score = 0;
      for (std::size_t i = 0; i < units.size(); ++i) s.score += units[i][s.pick[i]].score;
      if (!best || s.score < best->score) best = s;
      return;
    }
    for (std::size_t o = 0; o < units[u].size(); ++o) {
      cur.pick[u] = o;
      cur.cost += units[u][o].cost;
      cur.score += units[u][o].score;
      self(self, u + 1);
      cur.cost -= units[u][o].cost;
      cur.score -= units[u][o].score;
    }
  };
  rec(rec, 0);
  return best;
}

}  // namespace selq::planner
