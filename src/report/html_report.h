#pragma once
// `selq report`: one self-contained HTML page (inline SVG and CSS, no
// scripts) of a quantized checkpoint: the layer map by format and by error,
// where the bytes went, and, when given, the evaluation and the planner's
// front. The pictures are also returned as standalone SVG documents (for PNGs).
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::report {

struct ReportOptions {
  std::string eval_path;         // `selq eval --json` output ("" : none)
  std::string sensitivity_path;  // `selq sensitivity` output ("" : none)
  std::string source;            // source checkpoint for the front ("" : the manifest's)
  bool inside_checkpoint{false}; // the page goes into the checkpoint: it names no path of its own
};

struct Report {
  std::string html;
  std::vector<std::pair<std::string, std::string>> pictures;  // (name, standalone SVG)
  nlohmann::json summary;                                      // what `selq report --json` prints
};

// BadInput (one line) for a checkpoint without a manifest or metrics, an eval
// of another model, or a sensitivity table of another checkpoint.
Report build_report(const std::string& checkpoint_dir, const ReportOptions& options = {});

// Writes checkpoint_dir/selq-report.html (quantize does, after its manifest,
// before the run commits: pipeline::QuantizeOptions::before_commit).
void write_checkpoint_report(const std::string& checkpoint_dir);

// The same for the CLI's and Python's quantize: a checkpoint without its
// report is still a good checkpoint, so a failure returns false with the
// reason in `why` (to warn) instead of failing the run.
bool try_write_checkpoint_report(const std::string& checkpoint_dir, std::string& why);

}  // namespace selq::report
