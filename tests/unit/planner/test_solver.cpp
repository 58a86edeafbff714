// The knapsack solver against exhaustive search on small random instances, and
// against the LP relaxation's bound on large ones.
#include <cmath>
#include <random>

#include <gtest/gtest.h>

#include "planner/solver.h"

using namespace selq::planner;

namespace {

std::vector<std::vector<Option>> random_instance(std::mt19937& rng, int units, int options, int max_cost) {
  std::uniform_int_distribution<int> cost(1, max_cost), nopt(1, options);
  std::uniform_real_distribution<double> score(0.0, 1.0);
  std::vector<std::vector<Option>> inst(static_cast<std::size_t>(units));
  for (auto& u : inst) {
    const int n = nopt(rng);
    for (int o = 0; o < n; ++o) u.push_back({static_cast<std::uint64_t>(cost(rng)), score(rng)});
  }
  return inst;
}

std::uint64_t total_cost(const std::vector<std::vector<Option>>& inst, const Solution& s) {
  std::uint64_t c = 0;
  for (std::size_t u = 0; u < inst.size(); ++u) c += inst[u][s.pick[u]].cost;
  return c;
}

}  // namespace

TEST(KnapsackSolver, MatchesBruteForceWhenBucketsAreBytes) {
  std::mt19937 rng(42);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    auto inst = random_instance(rng, 1 + trial % 7, 4, 40);
    std::uint64_t max_budget = 0;
    for (const auto& u : inst) {
      std::uint64_t m = 0;
      for (const auto& o : u) m = std::max(m, o.cost);
      max_budget += m;
    }
    KnapsackSolver solver(inst, max_budget, /*max_buckets=*/1 << 20);
    ASSERT_EQ(solver.bucket_bytes(), 1u);
    for (std::uint64_t budget = 0; budget <= max_budget; budget += 3) {
      auto exact = brute_force(inst, budget);
      auto got = solver.solve(budget);
      ASSERT_EQ(exact.has_value(), got.has_value()) << "trial " << trial << " budget " << budget;
      if (!exact) continue;
      EXPECT_NEAR(got->score, exact->score, 1e-9) << "trial " << trial << " budget " << budget;
      EXPECT_LE(got->cost, budget);
      EXPECT_EQ(got->cost, total_cost(inst, *got));
      ++compared;
    }
  }
  EXPECT_GT(compared, 1000);
}

TEST(KnapsackSolver, CoarseBucketsStayFeasibleAndNearOptimal) {
  std::mt19937 rng(7);
  double worst_gap = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto inst = random_instance(rng, 8, 4, 1000);
    std::uint64_t max_budget = 8000;
    KnapsackSolver solver(inst, max_budget, /*max_buckets=*/64);
    EXPECT_GT(solver.bucket_bytes(), 1u);
    for (std::uint64_t budget = 1000; budget <= max_budget; budget += 700) {
      auto exact = brute_force(inst, budget);
      auto got = solver.solve(budget);
      ASSERT_EQ(exact.has_value(), got.has_value());
      if (!exact) continue;
      EXPECT_LE(got->cost, budget);
      EXPECT_GE(got->score, exact->score - 1e-9);  // never better than optimal
      worst_gap = std::max(worst_gap, got->score - exact->score);
    }
  }
  // 64 buckets over 8 units lose a little; the repair pass wins most of it back.
  EXPECT_LT(worst_gap, 0.5);
}

TEST(KnapsackSolver, InfeasibleBudgetAndMonotoneFront) {
  std::vector<std::vector<Option>> inst = {{{10, 1.0}, {20, 0.5}, {40, 0.0}}, {{5, 2.0}, {15, 0.1}}};
  KnapsackSolver solver(inst, 60);
  EXPECT_EQ(solver.min_cost(), 15u);
  EXPECT_FALSE(solver.solve(14).has_value());
  double prev = 1e9;
  for (std::uint64_t b = 15; b <= 60; ++b) {
    auto s = solver.solve(b);
    ASSERT_TRUE(s);
    EXPECT_LE(s->score, prev + 1e-12);  // more budget never hurts
    prev = s->score;
  }
  EXPECT_DOUBLE_EQ(solver.solve(55)->score, 0.1);
}

TEST(KnapsackSolver, RelaxedBoundIsBelowTheOptimum) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    auto inst = random_instance(rng, 1 + trial % 6, 5, 60);
    for (std::uint64_t budget = 0; budget <= 300; budget += 13) {
      auto exact = brute_force(inst, budget);
      const double bound = relaxed_lower_bound(inst, budget);
      if (!exact) {
        EXPECT_TRUE(std::isinf(bound));
        continue;
      }
      EXPECT_LE(bound, exact->score + 1e-9) << "trial " << trial << " budget " << budget;
    }
  }
  // Two units whose hulls are known: the bound mixes one step fractionally.
  std::vector<std::vector<Option>> inst = {{{10, 1.0}, {20, 0.5}, {30, 0.45}}, {{10, 2.0}, {40, 0.0}}};
  // From (20 bytes, score 3.0) the steps by gain per byte: unit 1's (30 bytes, -2.0), unit 0's first
  // (10 bytes, -0.5), unit 0's second (10 bytes, -0.05).
  EXPECT_DOUBLE_EQ(relaxed_lower_bound(inst, 35), 3.0 - 2.0 * 15 / 30);
  EXPECT_DOUBLE_EQ(relaxed_lower_bound(inst, 55), 1.0 - 0.5 * 5 / 10);
  EXPECT_DOUBLE_EQ(relaxed_lower_bound(inst, 70), 0.45);
  EXPECT_TRUE(std::isinf(relaxed_lower_bound(inst, 19)));
}

// With 70,000 units the buckets are coarse; the solution must still be within
// one hull step of the LP relaxation's bound, at every budget across the range.
TEST(KnapsackSolver, LargeInstanceIsWithinOneHullStepOfTheRelaxation) {
  std::mt19937 rng(5);
  auto inst = random_instance(rng, 70000, 6, 100000);
  std::uint64_t lo = 0, hi = 0;
  double max_step = 0;  // the largest score drop of one unit between two options
  for (const auto& u : inst) {
    std::uint64_t mn = UINT64_MAX, mx = 0;
    double smin = 1e9, smax = -1e9;
    for (const auto& o : u) {
      mn = std::min(mn, o.cost);
      mx = std::max(mx, o.cost);
      smin = std::min(smin, o.score);
      smax = std::max(smax, o.score);
    }
    lo += mn;
    hi += mx;
    max_step = std::max(max_step, smax - smin);
  }
  KnapsackSolver solver(inst, hi);
  EXPECT_GT(solver.bucket_bytes(), 1000u);  // far from exact DP
  for (int k = 1; k < 10; ++k) {
    const std::uint64_t budget = lo + (hi - lo) * static_cast<std::uint64_t>(k) / 10;
    auto s = solver.solve(budget);
    ASSERT_TRUE(s);
    EXPECT_LE(s->cost, budget);
    EXPECT_EQ(s->cost, total_cost(inst, *s));
    const double bound = relaxed_lower_bound(inst, budget);
    EXPECT_GE(s->score, bound - 1e-6) << "budget " << budget;
    EXPECT_LE(s->score - bound, max_step) << "budget " << budget << ": " << s->score << " vs bound " << bound;
  }
}

TEST(KnapsackSolver, LargeInstanceIsFeasible) {
  std::mt19937 rng(3);
  auto inst = random_instance(rng, 70000, 6, 100000);
  std::uint64_t lo = 0, hi = 0;
  for (const auto& u : inst) {
    std::uint64_t mn = UINT64_MAX, mx = 0;
    for (const auto& o : u) {
      mn = std::min(mn, o.cost);
      mx = std::max(mx, o.cost);
    }
    lo += mn;
    hi += mx;
  }
  KnapsackSolver solver(inst, hi);
  auto s = solver.solve((lo + hi) / 2);
  ASSERT_TRUE(s);
  EXPECT_LE(s->cost, (lo + hi) / 2);
  EXPECT_EQ(s->cost, total_cost(inst, *s));
}
