#include "report/histogram.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "report/markup.h"

namespace selq::report {

std::string render_histogram(const std::string& id, const std::string& title, const std::string& x_label,
                             const std::vector<double>& edges, const std::vector<std::int64_t>& counts) {
  if (edges.size() != counts.size() + 1)
    throw_bad_input(fmt::format("{}: {} bin edges for {} counts", title, edges.size(), counts.size()));
  std::size_t first = counts.size(), last = 0;
  std::int64_t total = 0, top = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0) throw_bad_input(fmt::format("{}: negative count in bin {}", title, i));
    if (counts[i] == 0) continue;
    first = std::min(first, i);
    last = i;
    total += counts[i];
    top = std::max(top, counts[i]);
  }
  if (total == 0) throw_bad_input(fmt::format("{}: every bin is empty", title));
  constexpr double kW = 640, kH = 300, kLeft = 60, kRight = 20, kTop = 36, kBottom = 52;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const std::size_t n = last - first + 1;
  const double bw = pw / static_cast<double>(n);
  const double ymax = static_cast<double>(top) / static_cast<double>(total);
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"histogram\" viewBox=\"0 0 {} {}\" width=\"{}\" "
      "height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"4\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      xml_escape(id), kW, kH, kW, kH, xml_escape(title));
  for (int k = 0; k <= 4; ++k) {
    const double v = ymax * k / 4, y = kTop + ph - ph * k / 4;
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#e3e3e3\"/><text x=\"{}\" "
                     "y=\"{:.1f}\" text-anchor=\"end\">{:.0f}%</text>\n",
                     kLeft, y, kLeft + pw, y, kLeft - 6, y + 4, 100 * v);
  }
  for (std::size_t i = first; i <= last; ++i) {
    const double x = kLeft + bw * static_cast<double>(i - first);
    const double frac = static_cast<double>(counts[i]) / static_cast<double>(total);
    const double h = ph * frac / ymax;
    o += fmt::format("<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"#4e79a7\"><title>"
                     "[{}, {}): {} positions ({:.1f}%)</title></rect>\n",
                     x + 0.5, kTop + ph - h, std::max(0.5, bw - 1), h, short_number(edges[i]),
                     short_number(edges[i + 1]), counts[i], 100 * frac);
  }
  // Tick labels at the edges that are 0 or powers of ten.
  for (std::size_t i = first; i <= last + 1; ++i) {
    const double e = edges[i];
    const double lg = e > 0 ? std::log10(e) : 0;
    if (!(e == 0 || std::abs(lg - std::round(lg)) < 1e-9)) continue;
    const double x = kLeft + bw * static_cast<double>(i - first);
    o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#333\"/><text x=\"{0:.1f}\" "
                     "y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                     x, kTop + ph, kTop + ph + 4, kTop + ph + 16, e == 0 ? "0" : short_number(e));
  }
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
                   kTop, pw, ph);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kH - 14,
                   xml_escape(x_label));
  o += fmt::format("<text transform=\"translate(16 {}) rotate(-90)\" text-anchor=\"middle\">share of positions</text>\n",
                   kTop + ph / 2);
  o += "</svg>\n";
  return o;
}

}  // namespace selq::report
