#pragma once
// One row per rounding (how a block's free parameters are chosen): its recipe
// name, what it needs besides the weight, how the kind kernels choose a
// block's scale under it, the kinds it rounds, what rounds in its place where
// its input is missing, and its line of help. The kernels, the plan, the
// shard writer, measure, the planner and the CLI ask this table; a new
// rounding is its enum value (quant/scheme.h), one row in rounding_traits.cpp,
// its file (as rounding_mse.cpp), its tests and its row in docs/RECIPES.md
// "Rounding" (docs/ARCHITECTURE.md "A rounding in one place").
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "quant/scheme.h"

namespace selq::quant {

// What a rounding needs besides the weight.
enum class RoundingInput : std::uint8_t {
  None,          // nothing: data-free
  InputMoments,  // each input channel's mean squared activation (selq calibrate writes them)
  ModelPass,     // the model run layer by layer on calibration text before the tensor is written (calibration/gptq_pass.h)
};

// How the kind kernels choose a block's scale.
enum class ScaleChoice : std::uint8_t {
  Rule,      // the format's scale rule
  Searched,  // the candidate with the least (weighted) squared error (quant/rounding_mse.h)
  Given,     // the scales the outputs hold on entry, written there by the model pass (quant/gptq_grid.h)
};

struct RoundingTraits {
  Rounding rounding;
  const char* name;  // recipe `rounding:`, --rounding, a demo/planner NAME+rounding
  RoundingInput input;
  ScaleChoice scales;
  // The scheme kinds it rounds (nullptr: every kind; where a kind has no free
  // parameter, as fp8-tensor's one scale, the rule's), and those kinds in words.
  bool (*takes)(SchemeKind);
  const char* takes_text;
  // What rounds in its place where its input is missing: the planner's tiers
  // without calibration rows, a member no calibration row reached.
  Rounding without_input;
  const char* help;  // its line of --rounding's help
};

const RoundingTraits& rounding_traits(Rounding r);
std::span<const RoundingTraits> all_rounding_traits();

// The row's name ("nearest", "mse", "weighted", "gptq").
const char* rounding_name(Rounding r);
// The rounding a recipe or option names. Throws BadInput naming `what` (e.g.
// "rounding") for an unknown name, listing the known ones.
Rounding parse_rounding(std::string_view name, std::string_view what);
// "nearest, mse, weighted, gptq", in table order.
std::string rounding_names_text();
// Every row's name and help, one per line (the CLI's --rounding help).
std::string rounding_help_text();
// Whether `r` rounds `kind` (its row's `takes`).
bool rounding_takes(Rounding r, SchemeKind kind);
// Throws Unsupported naming `tensor` when spec's rounding does not take its kind.
void check_rounding_supported(const SchemeSpec& spec, const std::string& tensor);

inline RoundingInput rounding_input(Rounding r) { return rounding_traits(r).input; }
inline ScaleChoice scale_choice(Rounding r) { return rounding_traits(r).scales; }

}  // namespace selq::quant
