#include "report/svg_chart.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "report/markup.h"

namespace selq::report {
namespace {

constexpr double kWidth = 800, kHeight = 520, kLeft = 80, kRight = 230, kTop = 50, kBottom = 60;
// Tableau-like palette, distinguishable in print and for most colour-blind readers.
constexpr const char* kColors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                   "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string number(double v) { return fmt::format("{:g}", v == 0 ? 0.0 : v); }  // no "-0"

}  // namespace

Chart Chart::from_json(const nlohmann::json& j, const std::string& path) {
  Chart c;
  try {
    c.title = j.value("title", "");
    c.x_label = j.value("x_label", "");
    c.y_label = j.value("y_label", "");
    c.log_y = j.value("log_y", false);
    for (const auto& sj : j.at("series")) {
      ChartSeries s;
      s.name = sj.at("name").get<std::string>();
      for (const auto& pj : sj.at("points"))
        s.points.push_back({pj.at("x").get<double>(), pj.at("y").get<double>(), pj.value("lo", 0.0),
                            pj.value("hi", 0.0)});
      c.series.push_back(std::move(s));
    }
  } catch (const nlohmann::json::exception& e) {
    throw_bad_input(fmt::format("{}: malformed chart: {}", path, e.what()));
  }
  return c;
}

namespace {

constexpr double kPlotWidth = kWidth - kLeft - kRight, kPlotHeight = kHeight - kTop - kBottom;

// The data's extent and the axes chosen for it, and the mapping to pixels.
struct Axes {
  double x0, x1, step;  // x range, tick step
  bool log_y;
  double ly0, ly1;  // y range, in log10 when log_y
  double fy(double v) const { return log_y ? std::log10(v) : v; }
  double px(double x) const { return kLeft + (x - x0) / (x1 - x0) * kPlotWidth; }
  double py(double y) const { return kTop + (1.0 - (fy(y) - ly0) / (ly1 - ly0)) * kPlotHeight; }
};

// x ticks 1, 2 or 5 x 10^k apart, its ends a little beyond the data on whole
// units (whole fifths of a step of 5 or more); log y on the 1-2-5 ticks
// around the data, linear y padded by 5%.
Axes chart_axes(const Chart& chart) {
  double x0 = std::numeric_limits<double>::infinity(), x1 = -x0, y0 = x0, y1 = -x0;
  for (const auto& s : chart.series)
    for (const auto& p : s.points) {
      const double lo = p.lo == 0 && p.hi == 0 ? p.y : p.lo, hi = p.lo == 0 && p.hi == 0 ? p.y : p.hi;
      if (chart.log_y && (p.y <= 0 || lo <= 0))
        throw_bad_input(fmt::format("chart: series '{}' has a value <= 0 on a log axis", s.name));
      x0 = std::min(x0, p.x);
      x1 = std::max(x1, p.x);
      y0 = std::min(y0, lo);
      y1 = std::max(y1, hi);
    }
  if (!std::isfinite(x0)) throw_bad_input("chart: no points");
  Axes a{};
  a.step = 1;
  for (int k = 0; (x1 - x0) / a.step > 12; ++k) a.step = std::array{2.0, 5.0, 10.0}[k % 3] * std::pow(10.0, k / 3);
  const double minor = a.step >= 5 ? a.step / 5 : a.step, xpad = std::max(0.03 * (x1 - x0), 0.25);
  a.x0 = std::floor((x0 - xpad) / minor) * minor;
  a.x1 = std::ceil((x1 + xpad) / minor) * minor;
  // A log axis only where the values span a range; within a factor of 4 it
  // would squeeze them into a sliver of one decade.
  a.log_y = chart.log_y && y1 >= 4 * y0;
  a.ly0 = a.fy(y0);
  a.ly1 = a.fy(y1);
  if (a.log_y) {
    const double d0 = std::floor(a.ly0), d1 = std::floor(a.ly1);
    double lo = d0, hi = d1 + 1;
    for (double m : {2.0, 5.0})
      if (d0 + std::log10(m) <= a.ly0 + 1e-12) lo = d0 + std::log10(m);
    for (double m : {5.0, 2.0, 1.0})
      if (d1 + std::log10(m) >= a.ly1 - 1e-12) hi = d1 + std::log10(m);
    a.ly0 = lo;
    a.ly1 = hi > lo + 1e-9 ? hi : lo + std::log10(2.0);
  } else {
    const double pad = (a.ly1 - a.ly0) * 0.05 + 1e-12;
    a.ly0 -= pad;
    a.ly1 += pad;
  }
  if (a.ly1 <= a.ly0) a.ly1 = a.ly0 + 1;
  return a;
}

// The title, grid, ticks, frame and axis labels.
std::string svg_frame(const Chart& chart, const Axes& a) {
  const double pw = kPlotWidth, ph = kPlotHeight;
  std::string o = fmt::format("<text x=\"{}\" y=\"28\" font-size=\"15\" text-anchor=\"middle\">{}</text>\n",
                              kLeft + pw / 2, xml_escape(chart.title));
  for (double x = std::ceil(a.x0 / a.step - 1e-9) * a.step; x <= a.x1 + 1e-9 * a.step; x += a.step) {
    o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1}\" x2=\"{0:.1f}\" y2=\"{2}\" stroke=\"#ddd\"/>\n", a.px(x), kTop,
                     kTop + ph);
    o += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", a.px(x), kTop + ph + 18,
                     number(x));
  }
  std::vector<double> yticks;
  if (a.log_y) {
    for (double e = std::floor(a.ly0); e <= a.ly1 + 1e-9; e += 1.0)
      for (double m : {1.0, 2.0, 5.0})
        if (std::log10(m) + e >= a.ly0 - 1e-9 && std::log10(m) + e <= a.ly1 + 1e-9)
          yticks.push_back(m * std::pow(10.0, e));
  } else {
    for (int i = 0; i <= 5; ++i) yticks.push_back(a.ly0 + (a.ly1 - a.ly0) * i / 5);
  }
  for (double y : yticks) {
    o += fmt::format("<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{}\" y2=\"{:.1f}\" stroke=\"#ddd\"/>\n", kLeft, a.py(y),
                     kLeft + pw, a.py(y));
    o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6, a.py(y) + 4,
                     fmt::format("{:.3g}", y));
  }
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#333\"/>\n", kLeft,
                   kTop, pw, ph);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2, kHeight - 18,
                   xml_escape(chart.x_label));
  o += fmt::format("<text transform=\"translate(22 {}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
                   kTop + ph / 2, xml_escape(chart.y_label + (a.log_y ? " (log scale)" : "")));
  return o;
}

// Series i: its line, its points with their intervals and names, and its
// legend entry.
std::string svg_series(const Chart& chart, std::size_t i, const Axes& a) {
  const auto& s = chart.series[i];
  const double pw = kPlotWidth;
  const std::string color = s.color.empty() ? kColors[i % std::size(kColors)] : s.color;
  auto pts = s.points;
  std::sort(pts.begin(), pts.end(), [](const ChartPoint& p, const ChartPoint& q) { return p.x < q.x; });
  std::string o;
  if (pts.size() > 1 && s.line) {
    std::string path;
    for (const auto& p : pts) path += fmt::format("{:.1f},{:.1f} ", a.px(p.x), a.py(p.y));
    o += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"/>\n", path, color);
  }
  for (const auto& p : pts) {
    if (p.lo != 0 || p.hi != 0)
      o += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.1f}\" x2=\"{0:.1f}\" y2=\"{2:.1f}\" stroke=\"{3}\"/>\n",
                       a.px(p.x), a.py(p.lo), a.py(p.hi), color);
    const double r = s.highlight ? 7.5 : pts.size() > 1 && s.line ? 3.5 : 5.5;
    o += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"{}\" fill=\"{}\"{}><title>{}: {} {}, {} {}</title></circle>\n",
                     a.px(p.x), a.py(p.y), r, color, s.highlight ? " stroke=\"black\" stroke-width=\"2\"" : "",
                     xml_escape(p.label.empty() ? s.name : p.label), xml_escape(chart.x_label), number(p.x),
                     xml_escape(chart.y_label), number(p.y));
    // Points not on a line are named where they are, for readers of a picture without hover.
    if (!s.line && !p.label.empty()) {
      const bool left = a.px(p.x) > kLeft + 0.7 * pw;  // keep the name inside the plot
      o += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"10\" fill=\"#333\"{}>{}</text>\n",
                       left ? a.px(p.x) - r - 3 : a.px(p.x) + r + 3, a.py(p.y) - r, left ? " text-anchor=\"end\"" : "",
                       xml_escape(p.label));
    }
  }
  const double ly = kTop + 10 + 20.0 * static_cast<double>(i);
  o += fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"5\" fill=\"{}\"{}/>\n", kLeft + pw + 18, ly, color,
                   s.highlight ? " stroke=\"black\" stroke-width=\"2\"" : "");
  o += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", kLeft + pw + 30, ly + 4, xml_escape(s.name));
  return o;
}

}  // namespace

std::string render_svg(const Chart& chart) {
  const Axes axes = chart_axes(chart);
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\"{} viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      chart.id.empty() ? "" : fmt::format(" id=\"{}\"", xml_escape(chart.id)), kWidth, kHeight, kWidth, kHeight);
  o += svg_frame(chart, axes);
  for (std::size_t i = 0; i < chart.series.size(); ++i) o += svg_series(chart, i, axes);
  return o + "</svg>\n";
}

}  // namespace selq::report
