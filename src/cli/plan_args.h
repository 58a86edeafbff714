#pragma once
// Options shared by `plan` and `quantize` (they run the same planning code).
#include <string>

#include <CLI/CLI.hpp>

#include "pipeline/plan.h"
#include "recipe/recipe.h"

namespace selq::cli {

struct PlanArgs {
  std::string source;
  std::string recipe;
  std::string dialect;        // overrides the recipe's
  std::string max_shard_size; // "5GB", "500MB"; empty keeps the source layout
  std::string calibration;    // `selq calibrate` output, for static activation scales
  bool strict{false};         // a plan warning is an error
  std::string rounding;       // --rounding: nearest (default) or mse, for rules that name none
};

// `recipe_required`: false for `plan`, which can also plan from a sensitivity table.
void add_plan_args(CLI::App& cmd, PlanArgs& args, bool recipe_required = true);
pipeline::PlanOptions plan_options(const PlanArgs& args);
// The recipe --recipe names, with --rounding applied (recipe::with_rounding).
recipe::Recipe load_plan_recipe(const PlanArgs& args);
std::uint64_t parse_size(const std::string& text);  // "5GB" -> bytes (powers of 1000; GiB of 1024)

}  // namespace selq::cli
