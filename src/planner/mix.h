#pragma once
// From a sensitivity table to a mix: the format of every decision unit that
// minimises the summed score within a size budget (solver.h), the Pareto
// front over budgets from one table, and the readable recipe a mix becomes.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/candidates.h"
#include "planner/constraints.h"
#include "planner/sensitivity.h"
#include "planner/solver.h"
#include "planner/units.h"

namespace selq::planner {

struct UnitChoice {
  std::size_t unit{0};  // index into UnitLayout::units
  std::string candidate;
  std::uint64_t bytes{0};
  double score{0};
};

struct Mix {
  std::vector<UnitChoice> choices;  // one per unit, in layout order
  std::uint64_t linear_bytes{0};    // what Plan::linear_totals().bytes will be
  double bits_per_weight{0};        // exactly Plan::bits_per_weight() of the emitted recipe
  double score{0};                  // summed objective (predicted loss, in the tier's units)
  nlohmann::json to_json(const UnitLayout& layout) const;
};

struct MixOptions {
  Tier tier{Tier::DataFree};
  bool acceptance{false};  // objective: mean total variation (measured tier) instead of KL
  // Per unit (layout order; empty: none), candidates a constraint refuses (constraints.h).
  std::vector<std::set<std::string>> forbidden;
};

class MixPlanner {
 public:
  // Throws BadInput when the table does not cover a unit of the layout (a
  // table made from another checkpoint) or lacks the tier for it.
  MixPlanner(const UnitLayout& layout, const SensitivityTable& table, std::vector<Candidate> candidates,
             const MixOptions& options);

  double min_bits_per_weight() const;  // every unit at its cheapest candidate
  double max_bits_per_weight() const;  // every unit at its most expensive candidate
  // The best mix within `target_bpw` (stored bits per linear weight), or
  // nullopt when even the cheapest mix is larger.
  std::optional<Mix> for_bits_per_weight(double target_bpw) const;
  // `points` budgets evenly spaced from the cheapest to the largest mix.
  std::vector<Mix> pareto(int points) const;
  // The mix that gives every unit `candidate` (bf16 where it cannot apply).
  Mix uniform(const std::string& candidate) const;

  const UnitLayout& layout() const { return layout_; }
  const std::vector<Candidate>& candidates() const { return candidates_; }

  // What the solver chooses from, for local search on top of it (refine.h):
  // unit u's options (exact stored bytes and score), each with its candidate.
  const std::vector<Option>& options(std::size_t unit) const { return solver_->units()[unit]; }
  const Candidate& candidate_of(std::size_t unit, std::size_t option) const {
    return candidates_[candidate_of_option_[unit][option]];
  }
  // The bytes the units may take for `target_bpw` (the layout's fixed bytes excluded).
  std::uint64_t unit_budget(double target_bpw) const {
    return std::min(budget_for(target_bpw), max_linear_bytes_ - layout_.fixed_bytes);
  }
  // The mix of one option index per unit.
  Mix make_mix(const std::vector<std::size_t>& pick) const;
  // The option index per unit of a mix this planner made.
  std::vector<std::size_t> pick_of(const Mix& mix) const;

 private:
  const UnitLayout& layout_;
  std::vector<Candidate> candidates_;
  MixOptions options_;
  std::vector<std::vector<std::size_t>> candidate_of_option_;  // per unit: option -> candidates_ index
  std::optional<KnapsackSolver> solver_;
  std::uint64_t max_linear_bytes_{0};

  std::uint64_t budget_for(double bpw) const;
};

// The recipe (YAML text) that reproduces `mix` exactly: one rule per
// candidate and unit kind, over the layers that took it, with a comment
// saying why. `header` lines go on top as comments.
// `serving`: the arch and serving settings the recipe states, so that
// planning it re-checks their constraints.
std::string mix_recipe(const Mix& mix, const UnitLayout& layout, const std::string& name,
                       const std::vector<std::string>& header, const ServingContext& serving = {});

// "self_attn.qkv_proj: 0-3 fp8-w8a8, 4-29 nvfp4-w4a16", one line per unit kind.
std::vector<std::string> mix_summary(const Mix& mix, const UnitLayout& layout);

}  // namespace selq::planner
