// `selq report DIR -o report.html`: the HTML report of a quantized checkpoint
// (report/html_report.h), with its evaluation and the planner's front.
#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "report/html_report.h"
#include "report/png.h"

namespace selq::cli {
namespace {

struct ReportArgs {
  std::string dir, out, png_dir;
  report::ReportOptions opt;
  bool json{false};
};

const CommandRegistration kReport(85, [](CLI::App& root, int& status) {
  auto a = std::make_shared<ReportArgs>();
  auto* cmd = root.add_subcommand(
      "report",
      "Write one self-contained HTML page (inline SVG, no scripts, opens offline) about a quantized\n"
      "checkpoint: the layer map by format and by measured error, where the bytes went, and with\n"
      "--eval / --sensitivity the evaluation with intervals and where the mix sits on the planner's front.");
  cmd->footer(
      "Examples:\n"
      "  selq report q/ -o report.html                          # the layer map and sizes\n"
      "  selq eval base/ q/ other/ --json > eval.json\n"
      "  selq report q/ --eval eval.json --sensitivity sens.json -o report.html\n"
      "  selq report q/ --eval eval.json -o report.html --png pictures/   # also PNGs (rsvg-convert)");
  cmd->add_option("checkpoint", a->dir, "Quantized checkpoint directory (with selq-manifest.json)")->required();
  cmd->add_option("--out,-o", a->out, "Output HTML file")->required();
  cmd->add_option("--eval", a->opt.eval_path, "`selq eval --json` output that includes this checkpoint");
  cmd->add_option("--sensitivity", a->opt.sensitivity_path,
                  "`selq sensitivity` table of the source: the Pareto front and sensitivity by depth");
  cmd->add_option("--source", a->opt.source, "Source checkpoint the front is planned on (default: the manifest's)");
  cmd->add_option("--png", a->png_dir, "Also write each chart as SVG and PNG into this directory (rsvg-convert)");
  cmd->add_flag("--json", a->json, "Print a JSON summary on stdout");
  cmd->callback([a, &status] {
    auto rep = report::build_report(a->dir, a->opt);
    io::write_file_atomic(a->out, rep.html);
    rep.summary["html"] = a->out;
    if (!a->png_dir.empty()) rep.summary["png"] = report::write_pngs(rep.pictures, a->png_dir);
    if (a->json)
      fmt::print("{}\n", rep.summary.dump(2));
    else
      fmt::print("{}: {} tensors, {} layers, {} pictures, {:.1f} kB\n", a->out, rep.summary["tensors"].get<std::size_t>(),
                 rep.summary["layers"].get<int>(), rep.pictures.size(), static_cast<double>(rep.html.size()) / 1e3);
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
