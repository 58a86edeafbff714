// `selq chart FRONT.json -o front.svg`: draws a quality front (report/svg_chart.h).
#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "report/svg_chart.h"

namespace selq::cli {
namespace {

const CommandRegistration kChart(80, [](CLI::App& root, int& status) {
  auto in = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  auto* cmd = root.add_subcommand("chart", "Draw series of (x, y, interval) points as an SVG chart.");
  cmd->footer(
      "Input: {\"title\", \"x_label\", \"y_label\", \"log_y\": true,\n"
      "        \"series\": [{\"name\", \"points\": [{\"x\", \"y\", \"lo\", \"hi\"}]}]}\n"
      "Examples:\n"
      "  bench/planner/front.sh                 # writes front.json, then runs:\n"
      "  selq chart /tmp/selq-planner-front/front.json -o front.svg");
  cmd->add_option("input", *in, "Chart JSON")->required();
  cmd->add_option("--out,-o", *out, "Output SVG file")->required();
  cmd->callback([in, out, &status] {
    auto j = nlohmann::json::parse(io::read_file(*in), nullptr, false);
    if (j.is_discarded()) throw_bad_input(fmt::format("{}: not valid JSON", *in));
    io::write_file_atomic(*out, report::render_svg(report::Chart::from_json(j, *in)));
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
