// `selq quantize SRC DST --recipe R`: the main job, file to file.
#include <fmt/format.h>

#include "calibration/gptq_pass.h"
#include "cli/calibration_text_option.h"
#include "cli/command.h"
#include "cli/plan_args.h"
#include "cli/progress_bar.h"
#include "io/checkpoint.h"
#include "io/rotation_record.h"
#include "pipeline/manifest.h"
#include "pipeline/quantize.h"
#include "report/html_report.h"
#include "rotation/rotate_checkpoint.h"

#include <filesystem>

#include "core/error.h"
#include "dist/ranks.h"

namespace selq::cli {
namespace {

struct QuantizeArgs {
  PlanArgs plan;
  std::string dst;
  bool force{false};
  bool quiet{false};
  bool json{false};
  bool allow_non_finite{false};
  bool in_place{false};
  bool resume{false};
  int threads{0};
  std::string memory_budget{"512MiB"};
  bool memory_budget_given{false};  // --memory-budget on the command line (then it also bounds GPTQ's Hessians)
  std::string split_by{"auto"};
  std::vector<std::string> calibration_text;  // --rounding gptq
  std::int64_t calibration_tokens{8192}, calibration_context{512};
  bool gptq_gate{true};
  double gptq_expert_prior{calibration::GptqPassOptions{}.expert_prior};
  std::string rotation;            // --rotation: none, r1, r1r2 (else the recipe's)
  std::uint64_t rotation_seed{0};
  std::int64_t rotation_block{-1};  // --rotation-block; -1: not given (the recipe's rotation_block, 0 by default)
};

// The checkpoint the run reads: the source, or with a rotation (--rotation or
// the recipe's) the source folded into DST.selq-rotated first (kept from an
// interrupted run; removed by the caller once the output is committed).
std::string quantized_source(const QuantizeArgs& a, const recipe::Recipe& recipe) {
  if (recipe.rotation.empty() || recipe.rotation == "none") return a.plan.source;
  if (a.in_place)
    throw_bad_input("a rotation rewrites every weight into a new checkpoint: it cannot run --in-place", {a.plan.source});
  if (dist::ranks().size() > 1)
    throw_unsupported("a rotation runs in one process: `selq rotate` first, then quantize the rotated checkpoint "
                      "under mpirun");
  if (std::filesystem::exists(a.dst) && !a.force) throw_bad_input("destination exists", {a.dst}, ErrorHint::ReplaceOutput);
  if (!a.plan.calibration.empty() && io::read_rotation_record(io::Checkpoint::open(a.plan.source)->dir()).is_null())
    throw_bad_input("--calibration measured the unrotated model, and the rotation changes every activation: "
                    "`selq rotate` first, `selq calibrate` the rotated checkpoint, then quantize that with --calibration",
                    {a.plan.calibration});
  rotation::RotateOptions ro;
  ro.kind = rotation::parse_rotation_kind(recipe.rotation, "rotation");
  ro.seed = a.rotation_seed;
  ro.block = recipe.rotation_block;
  ProgressBar bar("rotate", !a.quiet && stderr_is_tty(), ProgressBar::Unit::Count);
  ro.on_progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
  std::string src = rotation::rotated_source(a.plan.source, rotation::rotation_work_dir(a.dst), ro);
  bar.finish();
  return src;
}

// The run's options: progress on the bar, plan warnings on stderr, the HTML
// report written into the checkpoint before it commits (`html_written`).
pipeline::QuantizeOptions quantize_options(const QuantizeArgs& a, ProgressBar& bar, bool& html_written) {
  pipeline::QuantizeOptions qo;
  qo.overwrite = a.force;
  qo.threads = a.threads;
  qo.allow_non_finite = a.allow_non_finite;
  qo.split_by = a.split_by;
  qo.memory_budget = parse_size(a.memory_budget);
  qo.on_progress = [&bar](const pipeline::Progress& p) {
    bar.update(p.bytes_done, p.bytes_total, fmt::format("{}/{} tensors", p.tensors_done, p.tensors_total));
  };
  qo.on_plan = [quiet = a.quiet](const pipeline::Plan& plan) {
    if (!quiet)
      for (const auto& w : plan.warnings) fmt::print(stderr, "selq: warning: {}\n", w);
  };
  qo.before_commit = [&html_written](const std::string& staged) {
    std::string why;
    html_written = report::try_write_checkpoint_report(staged, why);
    if (!html_written) fmt::print(stderr, "selq: warning: no HTML report: {}\n", why);
  };
  return qo;
}

// --rounding gptq's layer-by-layer pass (run only when the plan rounds gptq).
// Every rank reports its own batches (a layer's line comes from rank 0) unless --quiet.
calibration::GptqPassOptions gptq_options(const QuantizeArgs& a, std::uint64_t memory_budget, bool quiet) {
  calibration::GptqPassOptions gptq;
  gptq.texts = a.calibration_text;
  gptq.gate = a.gptq_gate;
  gptq.expert_prior = a.gptq_expert_prior;
  gptq.max_tokens = a.calibration_tokens;
  gptq.context = a.calibration_context;
  gptq.threads = a.threads;
  gptq.hessian_budget = a.memory_budget_given ? memory_budget : 0;  // 0: half of RAM
  gptq.on_progress = [quiet](const std::string& line) {
    if (!quiet) fmt::print(stderr, "selq: {}\n", line);
  };
  return gptq;
}

void print_result(const QuantizeArgs& a, const pipeline::Plan& plan, const pipeline::QuantizeResult& result,
                  bool html_written) {
  const std::string written = a.in_place ? a.plan.source : a.dst;
  if (a.json) {
    nlohmann::json j = {{"destination", a.dst},
                        {"seconds", result.seconds},
                        {"bytes_read", result.bytes_read},
                        {"bytes_written", result.bytes_written},
                        {"bits_per_weight", plan.bits_per_weight()},
                        {"warnings", plan.warnings},
                        {"ranks", dist::ranks().size()},
                        {"split_by", result.split_by},
                        {"manifest", nlohmann::json::parse(result.manifest)}};
    fmt::print("{}\n", j.dump(2));
    return;
  }
  if (a.quiet) return;
  const double rate = result.seconds > 0 ? static_cast<double>(result.bytes_read) / result.seconds : 0;
  fmt::print("{}", pipeline::format_plan(plan));
  fmt::print("\nwrote {} in {:.2f}s ({} -> {}, {}/s)\n", written, result.seconds,
             human_bytes(static_cast<double>(result.bytes_read)), human_bytes(static_cast<double>(result.bytes_written)),
             human_bytes(rate));
  if (!result.split_by.empty()) fmt::print("{} ranks, work split by {}\n", dist::ranks().size(), result.split_by);
  if (html_written) fmt::print("report: {}/{}\n", written, pipeline::kHtmlReportName);
}

int run_quantize(QuantizeArgs& a) {
  // Under mpirun only rank 0 reports (it writes the manifest from every rank's records).
  const bool quiet_asked = a.quiet;
  if (dist::ranks().rank() != 0) {
    a.quiet = true;
    a.json = false;
  }
  auto recipe = load_plan_recipe(a.plan);
  if (!a.rotation.empty()) recipe = recipe::with_rotation(recipe, a.rotation);
  if (a.rotation_block >= 0) recipe = recipe::with_rotation_block(recipe, static_cast<int>(a.rotation_block));
  const std::string source = quantized_source(a, recipe);
  ProgressBar bar("quantize", !a.quiet && stderr_is_tty());
  bool html_written = false;
  pipeline::QuantizeOptions qo = quantize_options(a, bar, html_written);
  if (!a.in_place) calibration::use_gptq_pass(qo, gptq_options(a, qo.memory_budget, quiet_asked), a.dst);
  pipeline::QuantizeJob job{source, a.dst, a.in_place, std::move(recipe), plan_options(a.plan), a.resume};
  pipeline::Plan plan;
  const pipeline::QuantizeResult result = pipeline::quantize(job, qo, &plan);
  if (!a.in_place) calibration::remove_gptq_work_dir(a.dst);
  if (source != a.plan.source) std::filesystem::remove_all(source);  // the rotation made for this run
  bar.finish();
  if (result.already_done) {
    if (!a.quiet) fmt::print("{}: already quantized in place with this recipe; nothing to do\n", a.plan.source);
    return 0;
  }
  print_result(a, plan, result, html_written);
  return 0;
}

const CommandRegistration kQuantize(30, [](CLI::App& root, int& status) {
  auto args = std::make_shared<QuantizeArgs>();
  auto* cmd = root.add_subcommand(
      "quantize",
      "Quantize SRC into DST following a recipe. Streams tensor by tensor on all cores\n"
      "(memory bounded by the tensors in flight), writes shards, index, config.json with\n"
      "the dialect's quantization_config, the non-tensor files, selq-manifest.json and\n"
      "selq-report.txt and selq-report.html (selq report). Output is staged in DST.selq-partial and renamed when complete.");
  cmd->footer(
      "Examples:\n"
      "  selq quantize /models/Llama-3.1-8B out/llama-fp8 --recipe llama-fp8\n"
      "  selq quantize CKPT out --recipe llama-nvfp4 --dialect modelopt --max-shard-size 5GB\n"
      "  selq quantize CKPT out --recipe llama-nvfp4 --rounding mse   # searched block scales, same format\n"
      "  selq quantize CKPT out --recipe llama-nvfp4 --rounding gptq --calibration-text my.txt   # GPTQ, same format\n"
      "  selq calibrate CKPT -o calib.json && selq quantize CKPT out --recipe llama-fp8-static --calibration calib.json\n"
      "  selq quantize CKPT out --recipe llama-mxfp4 --rotation r1 --rounding gptq   # Hadamard-rotated first\n"
      "  selq quantize --in-place CKPT --recipe kimi-k3-nvfp4-fp8attn-fp8se   # re-run to resume\n"
      "  mpirun -np 16 --hostfile hosts selq quantize SRC DST --recipe R -j 8  # shards over 16 ranks (Open MPI)\n"
      "  mpirun -np 4 selq quantize SRC DST --recipe R --split-by tensor   # every shard spread over 4 ranks\n"
      "  mpirun -np 8 --hostfile hosts selq quantize SRC DST --recipe R --rounding gptq   # sequences, batches over 8\n"
      "  srun -N 8 --ntasks-per-node 2 --mpi=pmix selq quantize SRC DST --recipe R   # the same under Slurm");
  add_plan_args(*cmd, args->plan);
  cmd->add_option("destination", args->dst, "Output checkpoint directory (not with --in-place)");
  cmd->add_flag("--in-place", args->in_place,
                "Rewrite SRC shard by shard (temp file, fsync, atomic rename, journal); needs free space\n"
                "for one shard. Re-running the same command after a crash resumes it");
  cmd->add_flag("--resume", args->resume,
                "Continue an interrupted run (the default anyway: committed shards are kept when their\n"
                "hash matches the journal); fails if there is nothing to resume");
  cmd->add_flag("--force", args->force, "Replace DST if it exists");
  add_calibration_text_option(cmd, args->calibration_text, "--rounding gptq: the text the model runs on layer by layer");
  cmd->add_flag("!--no-gptq-gate", args->gptq_gate,
                "--rounding gptq: no gate (by default every eighth calibration sequence is held out of the fit and "
                "each linear keeps GPTQ's or the nearest rounding on its scales, whichever errs less on those rows)");
  cmd->add_option("--gptq-expert-prior", args->gptq_expert_prior,
                  "--rounding gptq on a MoE: a routed expert's gate/up Hessian with fewer tokens than this times its "
                  "inputs is completed with the layer's mean over every routed token (0: off; docs/RECIPES.md)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--calibration-tokens", args->calibration_tokens,
                  "--rounding gptq: tokens of that text used (0: all); more lower KL at proportional time "
                  "(MXFP4 on SmolLM2: 0.63x nearest's at 8192, 0.56x at 32768; docs/QUALITY.md)")
      ->capture_default_str();
  cmd->add_option("--calibration-context", args->calibration_context,
                  "--rounding gptq: tokens per calibration sequence")
      ->capture_default_str();
  cmd->add_option("--rotation", args->rotation,
                  "Fold an orthogonal rotation into the weights first (selq rotate): r1 the residual stream, r1r2\n"
                  "also each head's values; none (default, or the recipe's `rotation:`). Written to DST.selq-rotated,\n"
                  "kept for a resumed run, removed when DST is complete; a plain checkpoint every engine loads")
      ->check(CLI::IsMember({"none", "r1", "r1r2"}));
  cmd->add_option("--rotation-seed", args->rotation_seed, "--rotation: seed of its random signs")->capture_default_str();
  cmd->add_option("--rotation-block", args->rotation_block,
                  "--rotation: the residual rotated in runs of this many channels (32: an MX group's, best for MXFP4\n"
                  "with --rounding gptq); 0 all at once (default, or the recipe's rotation_block:)");
  cmd->add_flag("--quiet,-q", args->quiet, "No progress bar or summary");
  cmd->add_flag("--json", args->json, "Print a JSON summary (with per-tensor error metrics) on stdout");
  cmd->add_flag("--allow-non-finite", args->allow_non_finite, "Quantize weights containing NaN/Inf instead of failing");
  cmd->add_option("--threads,-j", args->threads, "Worker threads (default: all cores)");
  cmd->add_option("--split-by", args->split_by,
                  "Under mpirun, file to file: how the ranks share the work (default auto: by tensor\n"
                  "when shards are fewer than ranks or whole shards would leave them uneven)")
      ->check(CLI::IsMember({"auto", "shard", "tensor"}));
  auto* budget = cmd->add_option("--memory-budget", args->memory_budget,
                  "Bound on the run's anonymous memory, whatever the core count (default 512MiB, at\n"
                  "least 64MiB): tensors too large for their share are quantized in row blocks; with --rounding\n"
                  "gptq, given explicitly, it also bounds a layer's Hessians (default: half of RAM; beyond it\n"
                  "the layer's linears are rounded in batches, each costing one more pass through the layer)");
  cmd->callback([args, budget, &status] {
    args->memory_budget_given = budget->count() > 0;
    status = run_quantize(*args);
  });
});

}  // namespace
}  // namespace selq::cli
