// The rounding rows (quant/rounding_traits.h); the algorithms are one file
// each beside the schemes (rounding_mse.cpp, calibration/gptq.cpp).
#include "quant/rounding_traits.h"

#include <array>

#include <fmt/format.h>

#include "core/error.h"
#include "quant/scheme_traits.h"

namespace selq::quant {
namespace {

// A per-element grid GPTQ can round onto with the scales kept.
bool has_gptq_grid(SchemeKind kind) { return scheme_traits(kind).gptq_keeps_scales; }

constexpr std::array<RoundingTraits, 4> kRoundings{{
    {Rounding::Nearest, "nearest", RoundingInput::None, ScaleChoice::Rule, nullptr, "", Rounding::Nearest,
     "the format's scale rule, each value rounded to nearest: the bytes compressed-tensors, Quark and ModelOpt "
     "write (the default)"},
    {Rounding::Mse, "mse", RoundingInput::None, ScaleChoice::Searched, nullptr, "", Rounding::Mse,
     "per block, the candidate scale with the least squared error (on int4 and mxfp4 each element's weighted "
     "by its magnitude); never a worse block in that error; KL 0.65-0.95x nearest's for nvfp4 and int4, "
     "mxfp4 stores nearest's bytes (docs/QUALITY.md)"},
    {Rounding::Weighted, "weighted", RoundingInput::InputMoments, ScaleChoice::Searched, nullptr, "",
     Rounding::Mse,
     "mse with each input channel's error weighted by its mean squared activation (the input moments "
     "`selq calibrate` writes)"},
    {Rounding::Gptq, "gptq", RoundingInput::ModelPass, ScaleChoice::Given, has_gptq_grid,
     "mxfp4, mxfp8, nvfp4 and int schemes", Rounding::Mse,
     "GPTQ onto searched scales, the model run layer by layer on calibration text (quantize only; mxfp4, "
     "mxfp8, nvfp4 and int schemes)"},
}};

// Row i is the enum's value i: rounding_traits indexes by it.
constexpr bool roundings_in_enum_order() {
  for (std::size_t i = 0; i < kRoundings.size(); ++i)
    if (static_cast<std::size_t>(kRoundings[i].rounding) != i) return false;
  return true;
}
static_assert(roundings_in_enum_order(), "kRoundings: one row per Rounding, in enum order");

}  // namespace

const RoundingTraits& rounding_traits(Rounding r) { return kRoundings.at(static_cast<std::size_t>(r)); }
std::span<const RoundingTraits> all_rounding_traits() { return kRoundings; }

const char* rounding_name(Rounding r) { return rounding_traits(r).name; }

std::string rounding_names_text() {
  std::string s;
  for (const auto& t : kRoundings) s += fmt::format("{}{}", s.empty() ? "" : ", ", t.name);
  return s;
}

std::string rounding_help_text() {
  // CLI11 prints a description as given: each row's line is wrapped here.
  constexpr std::size_t kWidth = 100;
  std::string s;
  for (const auto& t : kRoundings) {
    std::string line = fmt::format("  {}:", t.name);
    for (std::string_view rest = t.help; !rest.empty();) {
      const std::size_t sp = rest.find(' ');
      const std::string_view word = rest.substr(0, sp);
      if (line.size() + 1 + word.size() > kWidth) {
        s += line + "\n";
        line = "   ";
      }
      line += fmt::format(" {}", word);
      rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    }
    s += line + (&t == &kRoundings.back() ? "" : "\n");
  }
  return s;
}

Rounding parse_rounding(std::string_view name, std::string_view what) {
  for (const auto& t : kRoundings)
    if (name == t.name) return t.rounding;
  throw_bad_input(fmt::format("unknown {} '{}' (expected one of: {})", what, name, rounding_names_text()));
}

bool rounding_takes(Rounding r, SchemeKind kind) {
  bool (*takes)(SchemeKind) = rounding_traits(r).takes;
  return takes == nullptr || takes(kind);
}

void check_rounding_supported(const SchemeSpec& spec, const std::string& tensor) {
  const RoundingTraits& t = rounding_traits(spec.rounding.value);
  if (!rounding_takes(t.rounding, spec.kind))
    throw_unsupported(fmt::format("rounding '{}' is implemented for {}, not {}; give this rule `rounding: {}`", t.name,
                                  t.takes_text, spec.name(), rounding_name(t.without_input)),
                      ErrorWhere{{}, tensor, {}});
}

}  // namespace selq::quant
