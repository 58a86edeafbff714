// `selq plan SRC --recipe R`: the dry run of `quantize` (headers only).
// `selq plan SRC --sensitivity S --target-bpw B`: choose the recipe (planner/).
#include <filesystem>

#include <cstdio>

#include <fmt/format.h>

#include "cli/calibration_text_option.h"
#include "cli/command.h"
#include "cli/deprecated_alias.h"
#include "cli/plan_args.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/calibration.h"
#include "pipeline/plan.h"
#include "planner/target.h"
#include "recipe/names.h"
#include "runtime/text/calibration_text.h"

namespace selq::cli {
namespace {

struct TargetArgs {
  std::string sensitivity, emit_recipe, hardware{"any"}, objective{"kl"}, tier, arch, kv_cache{"bf16"};
  std::vector<std::string> candidates;
  bool prefill_query_quant{false};
  double target_bpw{0};
  bool pareto{false};
  int pareto_points{12};
  int refine{0};
  std::vector<std::string> refine_text;
  std::int64_t refine_tokens{512}, refine_context{128};
  bool quiet{false};
};

planner::TargetRequest target_request(const PlanArgs& args, const TargetArgs& t) {
  planner::TargetRequest req;
  req.sensitivity_path = t.sensitivity;
  if (t.target_bpw > 0) req.target_bpw = t.target_bpw;
  if (t.pareto) req.pareto_points = t.pareto_points;
  req.hardware = planner::parse_hardware(t.hardware);
  if (t.objective != "kl" && t.objective != "acceptance")
    throw_bad_input(fmt::format("unknown --objective '{}' (kl, acceptance)", t.objective));
  req.acceptance = t.objective == "acceptance";
  if (!t.tier.empty()) req.tier = planner::parse_tier(t.tier);
  req.candidates = t.candidates;
  if (t.kv_cache != "bf16" && t.kv_cache != "fp8")
    throw_bad_input(fmt::format("unknown --kv-cache '{}' (bf16, fp8)", t.kv_cache));
  req.serving = {t.arch, t.kv_cache == "fp8", t.prefill_query_quant};
  if (!args.dialect.empty()) req.dialect = exporter::parse_dialect(args.dialect);
  if (!args.calibration.empty()) {
    req.activation_amax = pipeline::load_activation_amax(args.calibration);
    req.calibration_path = args.calibration;
  }
  if (t.refine < 0) throw_bad_input("--refine must be >= 0");
  if (t.refine > 0) {
    if (t.target_bpw <= 0) throw_bad_input("--refine needs --target-bpw (it refines that one mix)");
    if (t.refine_tokens < 2 || t.refine_context < 2) throw_bad_input("--calibration-tokens and --calibration-context must be >= 2");
    const auto text = runtime::calibration_text(t.refine_text);
    req.refine = t.refine;
    req.refine_text = {text.text, text.source, t.refine_tokens};
    req.refine_context = t.refine_context;
  }
  if (!t.emit_recipe.empty()) {
    auto stem = std::filesystem::path(t.emit_recipe).stem().string();
    if (!stem.empty()) req.recipe_name = stem;
  }
  return req;
}

void add_target_options(CLI::App* cmd, TargetArgs& t) {
  cmd->add_option("--sensitivity", t.sensitivity, "Sensitivity table from `selq sensitivity`: plan the formats");
  cmd->add_option("--target-bpw", t.target_bpw, "Budget: stored bits per linear weight (scales included)");
  cmd->add_option("--emit-recipe", t.emit_recipe, "Write the chosen mix as a recipe YAML");
  cmd->add_flag("--pareto", t.pareto, "Print the best mix at budgets from the smallest to the largest");
  cmd->add_option("--pareto-points", t.pareto_points, "Budgets on the front")->capture_default_str();
  cmd->add_option("--hardware", t.hardware, "Only formats this hardware runs: blackwell, hopper, mi355, any")
      ->capture_default_str();
  cmd->add_option("--objective", t.objective,
                  "kl (mean KL) or acceptance (mean total variation: needs a measured table or --refine)")->capture_default_str();
  cmd->add_option("--tier", t.tier, "Score tier to plan with (default: the table's best)");
  cmd->add_option("--candidates", t.candidates, "Candidate formats (default: the table's)")->delimiter(',');
  add_deprecated_option(cmd, "--schemes", t.candidates, "--candidates")->delimiter(',');
  std::vector<std::string> families;
  for (const auto& f : recipe::detail::recipe_families()) families.emplace_back(f.name);
  cmd->add_option("--arch", t.arch,
                  "Template family written into the planned recipe: " + recipe::detail::recipe_family_names())
      ->check(CLI::IsMember(families));
  cmd->add_option("--kv-cache", t.kv_cache, "Serving KV cache (bf16, fp8): with --prefill-query-quant, MLA "
                                             "kv_b_proj/o_proj take no activation-quantizing format")
      ->capture_default_str();
  cmd->add_flag("--prefill-query-quant", t.prefill_query_quant, "Serving quantizes prefill queries to FP8");
  cmd->add_option("--refine", t.refine,
                  "After solving, improve the mix by local search: at most N end-to-end measurements on "
                  "calibration text (architectures the runtime runs; each costs one forward pass over the text)")
      ->capture_default_str();
  add_calibration_text_option(cmd, t.refine_text, "Calibration text --refine measures on");
  cmd->add_option("--calibration-tokens", t.refine_tokens, "Tokens of it --refine measures on")->capture_default_str();
  cmd->add_option("--calibration-context", t.refine_context, "Window length for --refine")->capture_default_str();
  add_deprecated_option(cmd, "--refine-text", t.refine_text, "--calibration-text");
  add_deprecated_option(cmd, "--refine-tokens", t.refine_tokens, "--calibration-tokens");
  add_deprecated_option(cmd, "--refine-context", t.refine_context, "--calibration-context");
  cmd->add_flag("--quiet,-q", t.quiet, "No progress bar");
}

// --sensitivity: choose each unit's format under the budget.
void run_plan_target(const io::Checkpoint& ckpt, const PlanArgs& args, const TargetArgs& t, bool json) {
  if (!args.recipe.empty()) throw_bad_input("give --recipe or --sensitivity, not both");
  if (t.target_bpw <= 0 && !t.pareto) throw_bad_input("--sensitivity needs --target-bpw B or --pareto");
  if (!t.emit_recipe.empty() && t.target_bpw <= 0) throw_bad_input("--emit-recipe needs --target-bpw");
  auto req = target_request(args, t);
  ProgressBar bar("refine", !t.quiet && stderr_is_tty(), ProgressBar::Unit::Count);
  req.on_refine_progress = [&](int done, int total, double loss) {
    bar.update(static_cast<std::uint64_t>(done), static_cast<std::uint64_t>(total), fmt::format("loss {:.5g}", loss));
  };
  auto result = planner::plan_target(ckpt, req);
  bar.finish();
  if (!t.emit_recipe.empty()) io::write_file_atomic(t.emit_recipe, result.recipe_yaml);
  if (json)
    fmt::print("{}\n", result.to_json().dump(2));
  else
    fmt::print("{}{}", result.format(), t.emit_recipe.empty() ? "" : fmt::format("recipe: {}\n", t.emit_recipe));
}

// --recipe: the dry run of what quantize would do.
void run_plan_recipe(const io::Checkpoint& ckpt, const PlanArgs& args, bool json) {
  if (args.recipe.empty()) throw_bad_input("plan needs --recipe R, or --sensitivity S with --target-bpw");
  auto recipe = load_plan_recipe(args);
  auto plan = pipeline::make_plan(ckpt, recipe, plan_options(args));
  if (json) {
    plan.write_json([](std::string_view part) { std::fwrite(part.data(), 1, part.size(), stdout); });
    std::fputc('\n', stdout);
  } else {
    fmt::print("{}", pipeline::format_plan(plan));
  }
}

const CommandRegistration kPlan(20, [](CLI::App& root, int& status) {
  auto args = std::make_shared<PlanArgs>();
  auto t = std::make_shared<TargetArgs>();
  auto* cmd = root.add_subcommand("plan",
                                  "Dry run: resolve the recipe for every tensor (reading headers only) and print\n"
                                  "per-format counts and sizes, bits per weight, a per-layer map and warnings.\n"
                                  "With --sensitivity: choose each unit's format under a bits-per-weight budget.");
  cmd->footer(
      "Examples:\n"
      "  selq recipes                                       # the shipped recipe names\n"
      "  selq plan /models/Llama-3.1-8B --recipe llama-fp8  # a shipped recipe by name\n"
      "  selq plan CKPT --recipe my.yaml --dialect modelopt --json\n"
      "  selq sensitivity CKPT -o sens.json                 # then choose the formats:\n"
      "  selq plan CKPT --sensitivity sens.json --target-bpw 6 --emit-recipe mix.yaml\n"
      "  selq plan CKPT --sensitivity sens.json --pareto --hardware hopper --json\n"
      "  selq calibrate CKPT -o calib.json && selq plan CKPT --sensitivity sens.json --target-bpw 6 \\\n"
      "      --candidates nvfp4-w4a4,fp8-w8a8 --calibration calib.json --emit-recipe w4a4.yaml\n"
      "                                                     # every linear quantizes its activations\n"
      "  selq plan CKPT --sensitivity sens.json --target-bpw 6 --refine 32 --emit-recipe mix.yaml\n"
      "                                                     # then improve it end to end on calibration text");
  add_plan_args(*cmd, *args, /*recipe_required=*/false);
  auto json_flag = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_flag, "Print the plan as JSON (what quantize executes)");
  add_target_options(cmd, *t);
  cmd->callback([args, t, json_flag, &status] {
    auto ckpt = io::Checkpoint::open(args->source);
    if (!t->sensitivity.empty())
      run_plan_target(*ckpt, *args, *t, *json_flag);
    else
      run_plan_recipe(*ckpt, *args, *json_flag);
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
