#pragma once
// `selq plan SRC --sensitivity S --target-bpw B`: the mix for one budget (and
// the Pareto front over budgets), its recipe, and the proof that the recipe
// plans to exactly that mix and that every engine reads its config as decided.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "planner/mix.h"
#include "planner/refine.h"
#include "planner/runtime_tiers.h"

namespace selq::planner {

struct TargetRequest {
  std::string sensitivity_path;
  std::optional<double> target_bpw;
  int pareto_points{0};                  // 0: no front
  std::optional<Tier> tier;              // default: the table's
  bool acceptance{false};                // objective: total variation instead of KL
  Hardware hardware{Hardware::Any};
  std::vector<std::string> candidates;   // ids; empty: the table's
  // `selq calibrate` output (--calibration): calibrated candidates (NVFP4 W4A4)
  // are planned only with it, and the emitted recipe is checked with it.
  InputAmax activation_amax;
  std::string calibration_path;
  exporter::Dialect dialect{exporter::Dialect::CompressedTensors};
  std::string recipe_name{"planned-mix"};
  ServingContext serving;                // constraints to respect, written into the recipe
  // Local search on the real model after the solver (refine.h): at most this
  // many end-to-end evaluations (0: none), on `refine_text`.
  int refine{0};
  CalibrationText refine_text;
  std::int64_t refine_context{128};
  std::function<void(int done, int total, double loss)> on_refine_progress;
};

struct TargetResult {
  SensitivityTable table;
  UnitLayout layout;
  std::vector<Candidate> candidates;
  Tier tier{Tier::DataFree};
  bool acceptance{false};      // the objective was total variation
  double min_bpw{0}, max_bpw{0};
  std::optional<Mix> mix;      // for target_bpw (refined when asked)
  std::optional<RefineResult> refinement;
  nlohmann::json refine_text;  // provenance of the refinement's calibration text
  std::string recipe_yaml;     // the mix's recipe (checked)
  std::vector<Mix> front;      // pareto_points budgets
  std::vector<Mix> uniforms;   // every candidate alone, for comparison
  double seconds{0};

  nlohmann::json to_json() const;
  std::string format() const;
};

// BadInput when the target is below the cheapest mix (the message says the
// smallest and largest reachable bits per weight).
TargetResult plan_target(const io::Checkpoint& checkpoint, const TargetRequest& request);

// Plans `recipe_yaml` on the checkpoint (with the calibration's amax, for
// calibrated candidates) and throws Error unless every unit member gets the
// mix's scheme, the linear bytes equal the mix's, and the dialect's config
// passes the engines' self-check.
void check_mix_recipe(const io::Checkpoint& checkpoint, const UnitLayout& layout, const Mix& mix,
                      const std::string& recipe_yaml, const InputAmax& activation_amax = {},
                      const std::string& calibration_path = {});

}  // namespace selq::planner
