#pragma once
// What the planner's `weighted` and `gptq` candidates round with (quantize
// takes the same from `selq calibrate`'s moments and from its own gptq pass):
// each linear's input second moments and a decoder layer's input Hessians,
// from calibration tokens other than those the tiers score on (so the scores
// are not measured on the rows the rounding was fitted to), gathered when
// first asked for by running the source model over them: the moments in one
// run of the whole model, a layer's Hessians by running it up to that layer.
// A unit's gptq weights thus depend on that unit alone (quantize's gptq pass
// rounds each layer after the layers before it are rounded, which the scores
// do not model). The model must hold its source weights whenever they are
// gathered: plan --refine rounds its gptq options before it applies any mix.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "calibration/calibrate.h"
#include "calibration/input_hessians.h"
#include "runtime/model/causal_lm.h"

namespace selq::planner {

class RoundingInputs {
 public:
  // `tokens` (the rounding's own) in windows of `context`.
  RoundingInputs(runtime::CausalLM& model, const std::vector<std::int32_t>& tokens, std::int64_t context);

  // Mean x² per input channel of `module` over the tokens; empty when no row
  // reached it (an idle expert).
  std::vector<float> channel_weights(const std::string& module);

  // Σ x xᵀ of `module`'s input in decoder `layer` (its layer's Hessians are
  // gathered on first use); empty when no row reached it.
  std::span<const double> hessian(std::int64_t layer, const std::string& module);

  // +weighted and +gptq weights kept per unit and candidate once made (plan
  // --refine makes them all before the model holds any mix); off: made again.
  bool keep_rounded{false};
  std::map<std::string, std::vector<std::vector<float>>> rounded;

 private:
  void advance_to(std::int64_t layer);
  static void moments_hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows);

  runtime::CausalLM& model_;
  std::vector<std::vector<std::int32_t>> windows_;
  std::map<std::string, calibration::SquareSums> moments_;
  bool have_moments_{false};
  std::vector<std::vector<float>> hidden_;  // each window's hidden states at the input of layer at_layer_
  std::int64_t at_layer_{-1};               // -1: not embedded yet
  std::optional<calibration::InputHessians> hessians_;
  std::int64_t hessian_layer_{-1};
};

}  // namespace selq::planner
