#pragma once
// Colours of the report: one per weight format (a hue per family, so FP8
// variants read as FP8 and FP4 ones as FP4) and the error scale (viridis:
// perceptually even, readable in grey and by most colour-blind readers).
#include <map>
#include <string>
#include <vector>

namespace selq::report {

class FormatPalette {
 public:
  // Distinct colours for `formats` (any order; the same set gives the same colours).
  explicit FormatPalette(std::vector<std::string> formats);
  const std::string& color(const std::string& format) const;  // grey for a format not given
  const std::map<std::string, std::string>& colors() const { return colors_; }

 private:
  std::map<std::string, std::string> colors_;
};

// The colour of `v` on a viridis scale from `lo` (dark) to `hi` (bright),
// clamped. With lo == hi the middle colour.
std::string viridis(double v, double lo, double hi);

// Colour of an unquantized (exact) cell in the error view.
inline constexpr const char* kExactColor = "#ececec";

}  // namespace selq::report
