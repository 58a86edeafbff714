#pragma once
// A scatter chart with error bars as SVG, for quality fronts (bits per
// weight against mean KL): series of points joined by lines, vertical bars
// for each point's interval, linear x, linear or log y, a legend.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::report {

struct ChartPoint {
  double x{0}, y{0}, lo{0}, hi{0};  // lo == hi == 0: no interval
  std::string label{};               // hover text ("" : the series name)
};

struct ChartSeries {
  std::string name;
  std::vector<ChartPoint> points;
  bool line{true};        // join the points (sorted by x)
  bool highlight{false};  // larger, outlined markers (the chosen one)
  std::string color{};    // "" : the palette's next
};

struct Chart {
  std::string title, x_label, y_label;
  bool log_y{false};
  std::string id{};  // the SVG element's id
  std::vector<ChartSeries> series;
  // {"title", "x_label", "y_label", "log_y", "series": [{"name", "points": [{"x", "y", "lo", "hi"}]}]}
  static Chart from_json(const nlohmann::json& j, const std::string& path_for_errors);
};

// The SVG document (800 x 520 user units); x ticks at 1, 2 or 5 x 10^k apart. BadInput for an empty chart or a
// non-positive value on a log axis.
std::string render_svg(const Chart& chart);

}  // namespace selq::report
