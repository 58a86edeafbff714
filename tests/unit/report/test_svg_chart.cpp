#include <gtest/gtest.h>

#include "core/error.h"
#include "report/svg_chart.h"

using namespace selq;
using namespace selq::report;

namespace {
std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(SvgChart, DrawsEveryPointIntervalAndLegendEntry) {
  Chart c;
  c.title = "KL <vs> bits & more";
  c.log_y = true;
  c.series = {{"planned", {{4.5, 0.2, 0.18, 0.22}, {6.0, 0.05, 0.045, 0.055}, {8.0, 0.01, 0.009, 0.011}}},
              {"uniform nvfp4", {{4.5, 0.21, 0.19, 0.23}}}};
  const std::string svg = render_svg(c);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_EQ(count(svg, "<circle"), 4u + 2u);  // points + legend markers
  EXPECT_EQ(count(svg, "<polyline"), 1u);     // only the series with several points
  EXPECT_NE(svg.find("KL &lt;vs&gt; bits &amp; more"), std::string::npos);
  EXPECT_NE(svg.find("uniform nvfp4"), std::string::npos);
  EXPECT_NE(svg.find(">0.01<"), std::string::npos);  // a decade tick of the log axis
}

TEST(SvgChart, RejectsWhatItCannotDraw) {
  Chart empty;
  EXPECT_THROW(render_svg(empty), Error);
  Chart zero;
  zero.log_y = true;
  zero.series = {{"s", {{1, 0.0}}}};
  EXPECT_THROW(render_svg(zero), Error);
  EXPECT_THROW(Chart::from_json(nlohmann::json{{"series", {{{"points", 1}}}}}, "c.json"), Error);
}

TEST(SvgChart, LayerAxisStepsAndNarrowLogRangeFallsBackToLinear) {
  Chart c;
  c.x_label = "layer";
  c.log_y = true;
  ChartSeries s{"kind", {}};
  for (int l = 0; l < 61; ++l) s.points.push_back({static_cast<double>(l), 0.009 + 0.0001 * (l % 3)});
  c.series = {s};
  const std::string svg = render_svg(c);
  EXPECT_NE(svg.find(">60<"), std::string::npos);   // ticks every 5 (or 10) layers, not every one
  EXPECT_EQ(svg.find(">1<"), std::string::npos);
  EXPECT_EQ(svg.find(">-0<"), std::string::npos);
  EXPECT_EQ(svg.find("log scale"), std::string::npos);  // within a factor of 4: a linear axis
  // Points not joined by a line are named beside them; a highlighted one is outlined.
  Chart p;
  p.series = {{"uniform", {{4.5, 0.2, 0, 0, "llama-nvfp4"}}, false}, {"this mix", {{6, 0.1}}, false, true}};
  const std::string svg2 = render_svg(p);
  EXPECT_NE(svg2.find(">llama-nvfp4</text>"), std::string::npos);
  EXPECT_NE(svg2.find("stroke=\"black\""), std::string::npos);
}
