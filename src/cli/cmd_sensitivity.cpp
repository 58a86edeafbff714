// `selq sensitivity SRC -o sens.json`: what each decision unit loses under
// each candidate format (planner/sensitivity.h), for `selq plan --target-bpw`.
#include <fmt/format.h>

#include "cli/calibration_text_option.h"
#include "cli/command.h"
#include "cli/deprecated_alias.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "dist/ranks.h"
#include "export/dialect.h"
#include "export/dialect_read.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "planner/runtime_tiers.h"
#include "planner/sensitivity.h"
#include "planner/sensitivity_ranks.h"
#include "runtime/text/calibration_text.h"

namespace selq::cli {
namespace {

struct SensitivityArgs {
  std::string source, out, dialect, hardware{"any"}, tier{"data-free"};
  std::vector<std::string> text, candidates, probes;
  std::int64_t tokens{512}, context{128}, rows{256};
  int probe_every{1};
  bool quiet{false};
};

// The dialect a quantized source is in (its pre-quantized modules pass
// through in it), else compressed-tensors.
exporter::Dialect source_dialect(const io::Checkpoint& ckpt) {
  const auto& config = ckpt.config();
  const nlohmann::json qc = config.contains("quantization_config") ? config["quantization_config"]
                                                                    : exporter::side_file_config(ckpt.dir());
  return exporter::dialect_of_config(qc).value_or(exporter::Dialect::CompressedTensors);
}

void add_sensitivity_options(CLI::App* cmd, SensitivityArgs& a) {
  cmd->add_option("source", a.source, "Source checkpoint: a .safetensors file, a directory, or an index.json")
      ->required();
  cmd->add_option("--out,-o", a.out, "Output JSON file")->required();
  cmd->add_option("--candidates", a.candidates, "Candidate formats to score (default: all)")->delimiter(',');
  add_deprecated_option(cmd, "--schemes", a.candidates, "--candidates")->delimiter(',');
  cmd->add_option("--dialect", a.dialect,
                  "Dialect whose scale conventions are scored (default: a quantized source's own, else "
                  "compressed-tensors)");
  cmd->add_option("--hardware", a.hardware, "Only formats this hardware runs: blackwell, hopper, mi355, any")
      ->capture_default_str();
  cmd->add_option("--tier", a.tier, "data-free, activation-aware or measured")->capture_default_str();
  add_calibration_text_option(cmd, a.text, "Text for the runtime tiers");
  cmd->add_option("--calibration-tokens", a.tokens, "Tokens of the calibration text used (runtime tiers)")
      ->capture_default_str();
  cmd->add_option("--calibration-context", a.context, "Tokens per window (runtime tiers)")->capture_default_str();
  cmd->add_option("--rows", a.rows, "Input rows kept per unit (activation-aware)")->capture_default_str();
  cmd->add_option("--probes", a.probes,
                  "Candidates measured on every unit (measured tier; default: each unit's most lossy)")
      ->delimiter(',');
  cmd->add_option("--probe-every", a.probe_every,
                  "Measured tier: measure the units of every N-th layer and the last; interpolate the others")
      ->capture_default_str();
  add_deprecated_option(cmd, "--tokens", a.tokens, "--calibration-tokens");
  add_deprecated_option(cmd, "--context", a.context, "--calibration-context");
  cmd->add_flag("--quiet,-q", a.quiet, "No progress bar");
}

int run_sensitivity(const SensitivityArgs& a) {
  const auto tier = planner::parse_tier(a.tier);
  if (a.probe_every < 1) throw_bad_input("--probe-every must be at least 1");
  auto ckpt = io::Checkpoint::open(a.source);
  const auto dialect = a.dialect.empty() ? source_dialect(*ckpt) : exporter::parse_dialect(a.dialect);
  auto layout = planner::decision_units(*ckpt, dialect);
  auto candidates = planner::select_candidates(a.candidates, planner::parse_hardware(a.hardware), dialect);
  planner::check_tier_scores(candidates, tier);
  ProgressBar bar("sensitivity", !a.quiet && stderr_is_tty() && dist::ranks().rank() == 0);
  planner::SensitivityOptions opt;
  opt.on_progress = [&](std::uint64_t done, std::uint64_t total) { bar.update(done, total); };
  // Under mpirun the units are shared among the ranks in every tier; rank 0 writes the table.
  auto table = planner::data_free_sensitivity_on_ranks(*ckpt, layout, candidates, opt, dist::ranks());
  bar.finish();
  const bool lead = dist::ranks().rank() == 0;
  if (tier != planner::Tier::DataFree) {
    const auto text = runtime::calibration_text(a.text);
    planner::RuntimeTierOptions ropt;
    ropt.context = a.context;
    ropt.rows = a.rows;
    ropt.probe_every = a.probe_every;
    ropt.probes = a.probes;
    ProgressBar units_bar("units", !a.quiet && stderr_is_tty() && lead, ProgressBar::Unit::Count);
    ropt.on_progress = [&](const std::string& stage, std::uint64_t done, std::uint64_t total) {
      units_bar.update(done, total, stage);
    };
    planner::add_runtime_tiers_on_ranks(table, layout, candidates, a.source, {text.text, text.source, a.tokens}, tier,
                                        ropt, dist::ranks());
    units_bar.finish();
  }
  if (!lead) return 0;
  io::write_file_atomic(a.out, table.to_json().dump(1) + "\n");
  fmt::print("{}: {} units x {} candidates, {} tier, {:.1f} s\n", a.out, table.units.size(),
             table.candidates.size(), planner::tier_name(table.tier), table.seconds);
  if (table.units.empty())
    fmt::print(stderr, "note: {}: no unit to score: every linear module is already quantized in the source "
                       "(plan with `requantize: true` to change their formats)\n", a.source);
  return 0;
}

const CommandRegistration kSensitivity(22, [](CLI::App& root, int& status) {
  auto a = std::make_shared<SensitivityArgs>();
  auto* cmd = root.add_subcommand(
      "sensitivity",
      "Score every decision unit (q/k/v, gate/up, o_proj, down_proj, the experts of a layer) under every\n"
      "candidate format, for `selq plan --sensitivity`. Tiers: data-free (one read of each weight, any\n"
      "size), activation-aware (output error on calibration rows; runs the model), measured (KL with one\n"
      "unit quantized at a time, for the probe candidates; the others fitted from their output error).");
  std::string ids;
  for (const auto& c : planner::all_candidates())
    if (c.spec) ids += " " + c.id + (c.calibrated() ? " (plan needs --calibration)" : "");
  cmd->footer(
      "Candidates (--candidates, comma-separated; default all; bf16 always):\n "+ ids + "\n"
      "Any of them +mse, +weighted or +gptq (e.g. nvfp4-w4a16+gptq) is the same format with that rounding:\n"
      "the tiers score the rounded weights and the emitted recipe's rule says `rounding: ...`. +weighted and\n"
      "+gptq round with the calibration text's rows: the runtime tiers score them, data-free cannot.\n"
      "Examples:\n"
      "  selq sensitivity /models/Llama-3.1-8B -o sens.json\n"
      "  selq sensitivity CKPT --candidates fp8-w8a8,nvfp4-w4a16,mxfp4-w4a4 -o sens.json\n"
      "  selq sensitivity CKPT --candidates fp8-w8a8,nvfp4-w4a16,nvfp4-w4a16+mse -o sens.json\n"
      "  selq sensitivity CKPT --tier measured --calibration-text train.txt -o sens.json\n"
      "  selq sensitivity CKPT --tier activation-aware --candidates nvfp4-w4a16,nvfp4-w4a16+gptq -o sens.json\n"
      "  mpirun -np 16 selq sensitivity CKPT -o sens.json          # data-free units over 16 ranks\n"
      "  mpirun -np 8 --hostfile hosts selq sensitivity CKPT --tier measured -o sens.json   # every tier splits\n"
      "  selq plan CKPT --sensitivity sens.json --target-bpw 6 --emit-recipe mix.yaml");
  add_sensitivity_options(cmd, *a);
  cmd->callback([a, &status] { status = run_sensitivity(*a); });
});

}  // namespace
}  // namespace selq::cli
