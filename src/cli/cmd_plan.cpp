// `selq plan SRC --recipe R`: the dry run of `quantize` (headers only).
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/plan_args.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"

namespace selq::cli {
namespace {

const CommandRegistration kPlan(20, [](CLI::App& root, int& status) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = root.add_subcommand("plan",
                                  "Dry run: resolve the recipe for every tensor (reading headers only) and print\n"
                                  "per-format counts and sizes, bits per weight, a per-layer map and warnings.");
  cmd->footer(
      "Examples:\n"
      "  selq recipes                                       # the shipped recipe names\n"
      "  selq plan /models/Llama-3.1-8B --recipe llama-fp8  # a shipped recipe by name\n"
      "  selq plan CKPT --recipe my.yaml --dialect modelopt --json");
  add_plan_args(*cmd, *args);
  auto json_flag = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json_flag, "Print the plan as JSON (what quantize executes)");
  cmd->callback([args, json_flag, &status] {
    auto ckpt = io::Checkpoint::open(args->source);
    auto recipe = load_recipe_with_overrides(*args);
    auto plan = pipeline::make_plan(*ckpt, recipe, plan_options(*args));
    if (*json_flag)
      fmt::print("{}\n", plan.to_json().dump(2));
    else
      fmt::print("{}", pipeline::format_plan(plan));
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
