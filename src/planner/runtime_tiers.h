#pragma once
// Sensitivity tiers 2 and 3, which run the model (runtime/model/llama.h) on
// calibration text: the activation-aware output error of every unit and
// candidate, and the KL increase measured with one unit quantized at a time.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/sensitivity.h"
#include "planner/unit_rounding.h"
#include "runtime/model/llama.h"

namespace selq::planner {

// Linear module -> max |input activation| on the calibration text: the static
// scale of a calibrated candidate (Candidate::calibrated, NVFP4 W4A4).
using InputAmax = std::map<std::string, float>;

struct RuntimeTierOptions {
  std::int64_t context{128};      // tokens per window
  std::int64_t rows{256};         // input rows kept per unit for the output error (tier 2)
  // Tier 3: candidates measured on every unit ("": the unit's most lossy one
  // by tier 2). The others get the unit's measured KL per unit of output
  // error, times their own output error (a per-unit linear fit).
  std::vector<std::string> probes;
  // Tier 3 on the units of every N-th layer (and the last) only; the others
  // get the KL per output error of their kind interpolated over depth.
  int probe_every{1};
  std::function<void(const std::string& stage, std::uint64_t done, std::uint64_t total)> on_progress;
  // The units this process scores and measures (empty: every one): a rank's
  // share under mpirun (planner/sensitivity_ranks.h), which then fits the
  // measured tier's rest (fit_unmeasured) once every rank's units are in.
  std::function<bool(std::size_t unit)> include;
};

// Adds output_nmse to every scored candidate: ||X W^T - qdq(X) Q^T||^2 / ||X W^T||^2
// over `rows` input rows of each unit captured from `tokens` (members of a unit
// share their input, as engines fuse them for that reason). Returns every
// member's input amax over all of `tokens`, what calibrated candidates take.
// Candidates that round with calibration rows (+weighted, +gptq) are scored
// here first (weight_nmse too), rounded with what `rounding` gathers from its
// own tokens; without it they are refused.
InputAmax add_activation_aware(SensitivityTable& table, const UnitLayout& layout,
                               const std::vector<Candidate>& candidates, runtime::CausalLM& model,
                               const std::vector<std::int32_t>& tokens, const RuntimeTierOptions& options,
                               RoundingInputs* rounding = nullptr);

// Needs add_activation_aware first. Adds kl and tv to every scored candidate:
// measured for the probes, fitted for the rest; records which in `measured`.
// = measure_units, then fit_unmeasured.
void add_measured(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                  runtime::CausalLM& model, const std::vector<std::int32_t>& tokens, const InputAmax& input_amax,
                  const RuntimeTierOptions& options, RoundingInputs* rounding = nullptr);

// The measured tier's measurements: kl and tv of the probes on the units it
// measures (every --probe-every-th layer's, within options.include).
void measure_units(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                   runtime::CausalLM& model, const std::vector<std::int32_t>& tokens, const InputAmax& input_amax,
                   const RuntimeTierOptions& options, RoundingInputs* rounding = nullptr);
// The rest of the measured tier from its measurements: each candidate not
// measured gets its unit's KL per unit of output error (interpolated over depth
// on units not measured) times its own output error; the table becomes Measured.
void fit_unmeasured(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                    int probe_every);

// The weights a unit's members have once `candidate` has quantized them
// (dequantized to F32; NVFP4 members of a fused group share its global amax).
// `rounding` supplies what +weighted and +gptq round with (refused without).
std::vector<std::vector<float>> quantized_unit_weights(const UnitLayout& layout, const DecisionUnit& unit,
                                                       const Candidate& candidate, runtime::CausalLM& model,
                                                       RoundingInputs* rounding = nullptr);

struct CalibrationText {
  std::string text, source;   // default: runtime::default_text(Calibration)
  std::int64_t tokens{512};   // tokens used (the text's first ones)
};

// Tokens +weighted and +gptq candidates round with: the calibration text's
// next ones after the tokens scored (RoundingInputs).
inline constexpr std::int64_t kRoundingTokens = 4096;
// kRoundingTokens when a candidate rounds with calibration rows, else 0.
std::int64_t rounding_tokens_for(const std::vector<Candidate>& candidates);

// The first `text.tokens` tokens of the text in the checkpoint's tokenizer,
// the `rounding_tokens` after them (BadInput when the text has fewer), and
// the provenance (file and byte range) of the text they all cover.
struct CalibrationTokens {
  std::vector<std::int32_t> tokens, rounding;
  nlohmann::json provenance;
};
CalibrationTokens calibration_tokens(const std::string& checkpoint_dir, const CalibrationText& text,
                                     std::int64_t rounding_tokens = 0);

// Log-probabilities of every predicted position of `tokens` in windows of
// `context` (the evaluation's own routine, so the planner scores what
// `selq eval` measures); rows of the model's vocabulary size.
std::vector<float> calibration_logprobs(runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                                        std::int64_t context);

// Mean KL(base || q) and mean total variation 1 - sum min(p, q) over the rows.
struct Divergence {
  double kl{0}, tv{0};
};
Divergence mean_divergence(const std::vector<float>& base, const std::vector<float>& q, std::int64_t vocab);

// Puts `candidate`'s quantized weights (and activation mode, with its static
// scale from `input_amax` when calibrated) into the unit's linears of `model`
// and returns the linears they replaced, for swap_back.
std::vector<runtime::Linear> swap_in_candidate(const UnitLayout& layout, const DecisionUnit& unit,
                                               const Candidate& candidate, runtime::CausalLM& model,
                                               const InputAmax& input_amax = {}, RoundingInputs* rounding = nullptr);
void swap_back(const DecisionUnit& unit, std::vector<runtime::Linear> saved, runtime::CausalLM& model);

// Tiers 2 (and 3 when `tier` is Measured) on top of `table`: loads the model
// from the checkpoint directory, tokenizes the text, records its provenance.
// With options.include, only those units, and no fit_unmeasured.
void add_runtime_tiers(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                       const std::string& checkpoint_dir, const CalibrationText& text, Tier tier,
                       const RuntimeTierOptions& options);

}  // namespace selq::planner
