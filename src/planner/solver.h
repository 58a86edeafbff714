#pragma once
// Multiple-choice knapsack: every unit takes exactly one of its options, the
// sum of costs stays within a budget, the sum of scores is minimal. Solved by
// dynamic programming over cost buckets above each unit's cheapest option
// (exact when a bucket is one byte, i.e. when the budget's slack fits the
// bucket count), then repaired with the exact costs the bucket rounding gave up.
// With many units the buckets are coarse, so each solve also takes the greedy
// over the units' convex hulls (the LP relaxation rounded down, then repaired)
// and keeps the better: never worse than the LP bound by more than one hull step.
#include <cstdint>
#include <optional>
#include <vector>

namespace selq::planner {

struct Option {
  std::uint64_t cost{0};
  double score{0};
};

struct Solution {
  std::vector<std::size_t> pick;  // option index per unit
  std::uint64_t cost{0};
  double score{0};
};

// One step along a unit's lower convex hull of (cost, score) points.
struct HullStep {
  std::size_t unit, from, to;  // option indices
  std::uint64_t cost;          // extra bytes
  double score;                // score change (< 0)
};

class KnapsackSolver {
 public:
  // `units[u]`: the options of unit u (at least one each). `max_budget`: the
  // largest budget that will be asked; `max_buckets`: the DP resolution (0:
  // chosen so that the table takes about 5e7 steps, at most 2^20 buckets).
  KnapsackSolver(std::vector<std::vector<Option>> units, std::uint64_t max_budget, std::size_t max_buckets = 0);

  // The best choice whose total cost is at most `budget` (<= max_budget), or
  // nullopt when even the cheapest options exceed it. Every budget reuses the
  // one table, so a Pareto front costs one solve.
  std::optional<Solution> solve(std::uint64_t budget) const;

  std::uint64_t min_cost() const { return min_total_; }
  const std::vector<std::vector<Option>>& units() const { return units_; }
  std::uint64_t bucket_bytes() const { return bucket_; }

 private:
  std::vector<std::vector<Option>> units_;
  std::vector<std::size_t> cheapest_;
  std::uint64_t min_total_{0}, bucket_{1};
  std::size_t buckets_{0};
  std::vector<double> best_;                 // [buckets+1] after all units
  std::vector<std::uint8_t> choice_;         // [units][buckets+1]
  std::vector<std::uint32_t> rounded_extra_;  // per unit and option: ceil((cost - cheapest) / bucket)
  std::vector<std::size_t> first_option_;    // offset of unit u's options in rounded_extra_

  std::vector<HullStep> hull_steps_;  // best score gain per byte first

  void repair(Solution& s, std::uint64_t budget) const;
  Solution hull_greedy(std::uint64_t budget) const;
};

// The optimum of the linear-programming relaxation (a unit may take a mix of
// two neighbours on its lower convex hull): no solution within `budget` scores
// lower. +infinity when even the cheapest options exceed the budget.
double relaxed_lower_bound(const std::vector<std::vector<Option>>& units, std::uint64_t budget);

// Exhaustive search, for tests on small instances.
std::optional<Solution> brute_force(const std::vector<std::vector<Option>>& units, std::uint64_t budget);

}  // namespace selq::planner
