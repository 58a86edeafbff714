#pragma once
// How much each decision unit loses under each candidate format, in three
// tiers (docs/RECIPES.md "Planning"):
//   data-free        relative weight error ||W-Q||^2/||W||^2 from one read of each
//                    weight, plus a fixed prior for the activation quantizer;
//   activation-aware relative output error ||WX - Q qdq(X)||^2/||WX||^2 on input
//                    rows X captured from calibration text (activation error included);
//   measured         the mean KL increase on calibration text when only that
//                    unit is quantized (tier 3), where it was measured.
// The table is saved as JSON ("selq-sensitivity-v1"); costs are not stored
// (they depend on the dialect) but recomputed from the checkpoint by `plan`.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "planner/candidates.h"
#include "planner/units.h"

namespace selq::planner {

enum class Tier { DataFree, ActivationAware, Measured };
std::string tier_name(Tier t);                                   // "data-free", ...
std::optional<Tier> tier_from_name(const std::string& name);
Tier parse_tier(const std::string& name);  // BadInput listing the tiers when unknown

struct CandidateScore {
  double weight_nmse{0};                // data-free
  std::optional<double> output_nmse;    // activation-aware
  std::optional<double> kl;             // measured: mean KL(base || unit quantized) on calibration text
  std::optional<double> tv;             // measured: mean total variation 1 - sum min(p, q)
  bool measured{false};                 // kl/tv measured (true) or fitted from output_nmse
};

struct UnitSensitivity {
  std::string name, kind;
  int layer{-1};
  std::vector<std::string> members;
  std::map<std::string, CandidateScore> scores;  // candidate id -> score (absent: cannot apply)
};

struct SensitivityTable {
  std::string source;
  std::vector<std::string> candidates;  // ids, "bf16" first
  Tier tier{Tier::DataFree};            // the best tier every unit has
  nlohmann::json text_provenance;       // calibration text (tiers 2-3), else null
  std::vector<UnitSensitivity> units;
  double seconds{0};

  nlohmann::json to_json() const;
  static SensitivityTable from_json(const nlohmann::json& j, const std::string& path_for_errors);
  const UnitSensitivity* find(const std::string& unit) const;
};

SensitivityTable load_sensitivity(const std::string& path);

// What the solver minimises for one unit and candidate at `tier`: for the
// measured tier the KL (or TV when `acceptance`); activation-aware the output
// error; data-free the weight error plus activation_error_prior; 0 for bf16.
// nullopt when the table lacks that tier for it.
std::optional<double> objective_score(const CandidateScore& s, const Candidate& candidate, Tier tier,
                                      bool acceptance);

// The activation quantizer's relative error on a fixed heavy-tailed synthetic
// activation sample: the data-free tier's stand-in for activations it cannot see.
double activation_error_prior(quant::ActMode mode);

struct SensitivityOptions {
  std::function<void(std::uint64_t done, std::uint64_t total)> on_progress;  // bytes of weights scored
  // Which units (indices into the layout) to score; empty: all (one rank's
  // share under mpirun, planner/sensitivity_ranks.h).
  std::function<bool(std::size_t unit)> include;
};

// BadInput naming a candidate that `tier` cannot score: +weighted and +gptq
// round with calibration rows, which only the runtime tiers run.
void check_tier_scores(const std::vector<Candidate>& candidates, Tier tier);

// Tier 1: every candidate on every unit from one read of each weight
// (quant::measure_weight; memory: one fused group's source views, no outputs).
// Candidates that round with calibration rows are left to the runtime tiers.
SensitivityTable data_free_sensitivity(const io::Checkpoint& checkpoint, const UnitLayout& layout,
                                       const std::vector<Candidate>& candidates, const SensitivityOptions& options = {});

}  // namespace selq::planner
