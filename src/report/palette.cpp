#include "report/palette.h"

#include <algorithm>
#include <array>
#include <cmath>

#include <fmt/format.h>

namespace selq::report {
namespace {

struct Family {
  const char* prefix;
  std::vector<const char*> shades;  // taken in order by the family's formats
};

// Longest prefixes first: "mxfp8" before "fp8" is not a prefix problem, but
// "int4" must win over "int".
const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"unquantized", {"#d9d9d9"}},
      {"pre-quantized", {"#9e9e9e"}},
      {"mxfp8", {"#b07aa1", "#d4a6c8"}},
      {"mxfp4", {"#4e79a7", "#a0cbe8", "#2f4b7c"}},
      {"nvfp4", {"#59a14f", "#8cd17d", "#2d6a27"}},
      {"fp8", {"#f28e2b", "#ffbe7d", "#c05a00", "#9c755f"}},
      {"int8", {"#edc948", "#b6992d"}},
      {"int4", {"#e15759", "#ff9d9a"}},
      {"", {"#79706e", "#17becf", "#bcbd22", "#8c564b", "#e377c2"}},
  };
  return f;
}

}  // namespace

FormatPalette::FormatPalette(std::vector<std::string> formats) {
  std::sort(formats.begin(), formats.end());
  formats.erase(std::unique(formats.begin(), formats.end()), formats.end());
  std::map<const Family*, std::size_t> used;
  for (const auto& f : formats) {
    for (const auto& fam : families()) {
      if (!f.starts_with(fam.prefix)) continue;
      std::size_t& n = used[&fam];
      colors_[f] = fam.shades[n % fam.shades.size()];
      ++n;
      break;
    }
  }
}

const std::string& FormatPalette::color(const std::string& format) const {
  static const std::string grey = "#79706e";
  auto it = colors_.find(format);
  return it == colors_.end() ? grey : it->second;
}

std::string viridis(double v, double lo, double hi) {
  // viridis at 0, 1/8, ..., 1 (matplotlib's table), interpolated linearly in RGB.
  static constexpr std::array<std::array<double, 3>, 9> kStops = {{{68, 1, 84},
                                                                   {71, 44, 122},
                                                                   {59, 81, 139},
                                                                   {44, 113, 142},
                                                                   {33, 144, 141},
                                                                   {39, 173, 129},
                                                                   {92, 200, 99},
                                                                   {170, 220, 50},
                                                                   {253, 231, 37}}};
  double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
  if (!std::isfinite(t)) t = v > lo ? 1.0 : 0.0;
  t = std::clamp(t, 0.0, 1.0) * (kStops.size() - 1);
  const auto i = std::min<std::size_t>(static_cast<std::size_t>(t), kStops.size() - 2);
  const double f = t - static_cast<double>(i);
  auto c = [&](int k) { return static_cast<int>(std::lround(kStops[i][k] + f * (kStops[i + 1][k] - kStops[i][k]))); };
  return fmt::format("#{:02x}{:02x}{:02x}", c(0), c(1), c(2));
}

}  // namespace selq::report
