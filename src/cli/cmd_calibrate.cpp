// `selq calibrate SRC --calibration-text FILE`: per-linear activation amax for static
// activation scales, and input second moments for rounding `weighted`.
#include <fmt/format.h>

#include "calibration/calibrate.h"
#include "cli/calibration_text_option.h"
#include "cli/command.h"
#include "cli/deprecated_alias.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "dist/ranks.h"
#include "runtime/text/calibration_text.h"

namespace selq::cli {
namespace {

struct CalibrateArgs {
  std::string src, out;
  std::vector<std::string> text;
  std::int64_t max_tokens{2048}, context{256};
  bool quiet{false};
};

const CommandRegistration kCalibrate(65, [](CLI::App& root, int& status) {
  auto a = std::make_shared<CalibrateArgs>();
  auto* cmd = root.add_subcommand(
      "calibrate",
      "Run text through SRC with the reference runtime and record each linear's input\n"
      "activation amax (JSON: {\"format\": \"selq-calibration-v1\", \"activation_amax\": {module: amax}})\n"
      "and, with -o, each input channel's mean squared activation beside it (OUT.moments.safetensors,\n"
      "named in the JSON) for `selq quantize --rounding weighted --calibration OUT`.");
  cmd->footer(
      "Examples:\n"
      "  selq calibrate CKPT -o calib.json                  # the default calibration mix\n"
      "  selq calibrate CKPT --calibration-text my-domain.txt --calibration-tokens 8192 -o calib.json\n"
      "  mpirun -np 8 --hostfile hosts selq calibrate CKPT -o calib.json   # the windows shared by 8 ranks\n"
      "  selq quantize CKPT OUT --recipe llama-nvfp4 --rounding weighted --calibration calib.json");
  cmd->add_option("source", a->src, "Checkpoint directory (with tokenizer.json)")->required();
  add_calibration_text_option(cmd, a->text, "Calibration text");
  cmd->add_option("--out,-o", a->out, "Output JSON file (default: stdout)");
  cmd->add_option("--calibration-tokens", a->max_tokens, "Tokens of the text used (0: all)")->capture_default_str();
  cmd->add_option("--calibration-context", a->context, "Tokens per window")->capture_default_str();
  add_deprecated_option(cmd, "--text", a->text, "--calibration-text");
  add_deprecated_option(cmd, "--max-tokens", a->max_tokens, "--calibration-tokens");
  add_deprecated_option(cmd, "--context", a->context, "--calibration-context");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress bar");
  cmd->callback([a, &status] {
    const bool lead = dist::ranks().rank() == 0;  // under mpirun rank 0 reports and writes
    ProgressBar bar("calibrate", !a->quiet && stderr_is_tty() && lead);
    const auto text = runtime::calibration_text(a->text);
    auto r = calibration::calibrate(a->src, text.text, text.source, a->max_tokens, a->context,
                                [&bar](std::uint64_t d, std::uint64_t t) { bar.update(d, t, "windows"); });
    bar.finish();
    status = 0;
    if (!lead) return;
    if (a->out.empty()) {
      fmt::print("{}", r.to_json().dump(2) + "\n");
      if (!a->quiet)
        fmt::print(stderr, "input second moments (for --rounding weighted) are written only with -o FILE\n");
    } else {
      r.save(a->out);
      if (!a->quiet)
        fmt::print(stderr, "wrote {} and {} ({} modules, {} tokens)\n", a->out,
                   calibration::input_moments_path_for(a->out), r.amax.size(), r.tokens);
    }
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
