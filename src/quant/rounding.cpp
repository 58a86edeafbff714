// Rounding names (quant/scheme.h); the algorithms are one file each beside
// the schemes (rounding_mse.cpp).
#include <fmt/format.h>

#include "core/error.h"
#include "quant/scheme.h"

namespace selq::quant {

const char* rounding_name(Rounding r) {
  switch (r) {
    case Rounding::Nearest: return "nearest";
    case Rounding::Mse: return "mse";
    case Rounding::Weighted: return "weighted";
  }
  return "?";
}

Rounding parse_rounding(std::string_view name, std::string_view what) {
  if (name == "nearest") return Rounding::Nearest;
  if (name == "mse") return Rounding::Mse;
  if (name == "weighted") return Rounding::Weighted;
  if (name == "gptq")
    throw_bad_input(fmt::format("{} '{}' is not implemented yet (available: nearest, mse, weighted)", what, name));
  throw_bad_input(fmt::format("unknown {} '{}' (expected one of: nearest, mse, weighted)", what, name));
}

}  // namespace selq::quant
