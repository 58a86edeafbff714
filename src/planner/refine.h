#pragma once
// Refinement of a planned mix by measuring it end to end: per-unit losses do
// not add up exactly (EvoPress, ICML 2025), so the solver's mix is improved by
// local search on the real model. A move raises one unit to a larger format
// and lowers another to a smaller one within the budget; moves are tried in
// order of their predicted cost (the table's scores), those made of changes
// that failed less often first, and kept when the measured loss of the whole
// mix on calibration text goes down.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/mix.h"
#include "planner/runtime_tiers.h"
#include "runtime/model/llama.h"

namespace selq::planner {

struct RefineOptions {
  int evaluations{32};        // end-to-end measurements of proposed mixes, at most
  std::int64_t context{128};  // tokens per window
  bool acceptance{false};     // loss: mean total variation instead of mean KL
  // Moves considered per round: the `width` most promising raises and lowers.
  std::size_t width{64};
  std::function<void(int done, int total, double loss)> on_progress;
  InputAmax input_amax;  // calibrated candidates' static scales (the plan's --calibration)
  // What +weighted and +gptq options round with (calibration_tokens' `rounding`;
  // empty: the tokens measured, in-sample).
  std::vector<std::int32_t> rounding_tokens;
};

struct RefineStep {
  std::string raised, lowered;  // "model.layers.3.mlp.down_proj: nvfp4-w4a16 -> fp8-w8a8"
  double loss{0};               // measured loss of the mix with this move
  bool kept{false};
};

struct RefineResult {
  Mix start, mix;              // the solver's mix and the refined one
  double start_loss{0}, loss{0};
  bool converged{false};       // no move left that the budget allows and was not tried
  std::vector<RefineStep> steps;
  std::int64_t positions{0};   // predicted positions the loss averages over
  double seconds{0};
  nlohmann::json to_json(const UnitLayout& layout) const;
};

// `start` must come from `planner`; the refined mix keeps within `unit_budget`
// (MixPlanner::unit_budget). `model` is the unquantized checkpoint; it is
// left as it was given. `tokens`: calibration text, never evaluation text.
RefineResult refine_mix(const MixPlanner& planner, const Mix& start, std::uint64_t unit_budget,
                        runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                        const RefineOptions& options);

}  // namespace selq::planner
