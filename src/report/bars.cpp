#include "report/bars.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "report/markup.h"

namespace selq::report {

std::string render_size_bars(const std::string& id, const std::string& title, const std::vector<SizeBar>& rows) {
  if (rows.empty()) throw_bad_input(fmt::format("{}: no rows to draw", title));
  constexpr double kLabel = 150, kBar = 250, kText = 180, kRow = 26, kTop = 34;
  std::uint64_t largest = 1;
  for (const auto& r : rows) largest = std::max({largest, r.before, r.after});
  const double width = kLabel + kBar + kText, height = kTop + kRow * static_cast<double>(rows.size()) + 28;
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" id=\"{}\" class=\"bars\" viewBox=\"0 0 {} {}\" width=\"{}\" "
      "height=\"{}\" font-family=\"sans-serif\" font-size=\"11\">\n<rect width=\"100%\" height=\"100%\" "
      "fill=\"white\"/>\n<text x=\"4\" y=\"18\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
      xml_escape(id), width, height, width, height, xml_escape(title));
  auto len = [&](std::uint64_t b) { return std::max(1.0, kBar * static_cast<double>(b) / static_cast<double>(largest)); };
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    const double y = kTop + kRow * static_cast<double>(i);
    const std::string ratio =
        r.before ? fmt::format(" ({:.2f}x)", static_cast<double>(r.after) / static_cast<double>(r.before)) : "";
    // 24 characters fit the label column at 11 px; longer names keep both ends.
    const std::string label = r.label.size() > 24 ? r.label.substr(0, 11) + "..." + r.label.substr(r.label.size() - 10)
                                                  : r.label;
    o += fmt::format("<g class=\"bar\"><title>{}: {} before, {} after{}</title>\n", xml_escape(r.label),
                     decimal_bytes(r.before), decimal_bytes(r.after), ratio);
    o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLabel - 6, y + 14, xml_escape(label));
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"8\" fill=\"white\" stroke=\"#777\"/>\n", kLabel,
                     y + 2.5, len(r.before));
    o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{:.1f}\" height=\"9\" fill=\"{}\"/>\n", kLabel, y + 12,
                     len(r.after), r.color.empty() ? "#4e79a7" : r.color);
    o += fmt::format("<text x=\"{}\" y=\"{}\">{} &#8594; {}{}</text></g>\n", kLabel + kBar + 8, y + 14,
                     decimal_bytes(r.before), decimal_bytes(r.after), ratio);
  }
  const double ly = kTop + kRow * static_cast<double>(rows.size()) + 8;
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"8\" fill=\"white\" stroke=\"#777\"/><text x=\"{}\" "
                   "y=\"{}\">before (source)</text><text x=\"{}\" y=\"{}\">filled: after (stored, scales included)</text>\n",
                   kLabel, ly, kLabel + 16, ly + 9, kLabel + 110, ly + 9);
  o += "</svg>\n";
  return o;
}

}  // namespace selq::report
