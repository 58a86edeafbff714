// Rounding names (quant/scheme.h); the algorithms are one file each beside
// the schemes (rounding_mse.cpp).
#include <fmt/format.h>

#include "core/error.h"
#include "quant/scheme.h"
#include "quant/scheme_traits.h"

namespace selq::quant {

const char* rounding_name(Rounding r) {
  switch (r) {
    case Rounding::Nearest: return "nearest";
    case Rounding::Mse: return "mse";
    case Rounding::Weighted: return "weighted";
    case Rounding::Gptq: return "gptq";
  }
  return "?";
}

Rounding parse_rounding(std::string_view name, std::string_view what) {
  if (name == "nearest") return Rounding::Nearest;
  if (name == "mse") return Rounding::Mse;
  if (name == "weighted") return Rounding::Weighted;
  if (name == "gptq") return Rounding::Gptq;
  throw_bad_input(fmt::format("unknown {} '{}' (expected one of: nearest, mse, weighted, gptq)", what, name));
}

bool gptq_supports(SchemeKind kind) { return scheme_traits(kind).gptq_keeps_scales; }

void check_gptq_supported(const SchemeSpec& spec, const std::string& tensor) {
  if (spec.rounding.value == Rounding::Gptq && !gptq_supports(spec.kind))
    throw_unsupported(fmt::format("rounding 'gptq' is implemented for mxfp4, mxfp8, nvfp4 and int schemes, not {}; "
                                  "give this rule `rounding: mse`",
                                  spec.name()),
                      ErrorWhere{{}, tensor, {}});
}

}  // namespace selq::quant
