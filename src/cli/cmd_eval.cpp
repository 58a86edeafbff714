// `selq eval BASE QUANT... --text FILE`: quality of quantized checkpoints
// against their base with the reference runtime.
#include <filesystem>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "runtime/eval/base_logprobs.h"
#include "runtime/eval/eval.h"
#include "runtime/text/default_text.h"

namespace selq::cli {
namespace {

struct EvalArgs {
  std::string base;
  std::vector<std::string> quantized;
  std::string text;
  std::string prompts;
  runtime::EvalOptions opts;
  bool json{false};
  bool quiet{false};
  bool no_base_cache{false};
};

const CommandRegistration kEval(60, [](CLI::App& root, int& status) {
  auto a = std::make_shared<EvalArgs>();
  a->opts.base_cache_dir = runtime::default_base_logprobs_dir();
  auto* cmd = root.add_subcommand(
      "eval",
      "Measure quantized checkpoints against their base with selq's reference runtime\n"
      "(which loads each linear from the checkpoint's quantization_config as an engine does):\n"
      "perplexity on --text, KL divergence of next-token distributions (mean, p99), top-1\n"
      "agreement, and speculative-decoding acceptance with each quantized model drafting\n"
      "k tokens for the base on the --prompts questions. Estimators: docs/QUALITY.md.");
  cmd->footer(
      "Examples:\n"
      "  selq eval base/ fp8/ nvfp4/                        # default text and prompts (Austen)\n"
      "  selq eval base/ fp8/ --text wiki.test.txt --max-tokens 8192 --json > eval.json\n"
      "  selq eval base/ mix/ --text wiki.test.txt --max-tokens 8192   # later: the base's pass is read from the cache\n"
      "The base's log-probabilities over the text are cached (2 bytes per vocabulary entry and token,\n"
      "keyed by the base's content, the tokens and --context), so each later model costs one pass.");
  cmd->add_option("base", a->base, "Unquantized checkpoint directory (the reference)")->required();
  cmd->add_option("quantized", a->quantized, "Quantized checkpoint directories");
  cmd->add_option("--text", a->text,
                  "UTF-8 text file for perplexity/KL (default: Jane Austen's Emma, from Debian's r-cran-janeaustenr)");
  cmd->add_option("--max-tokens", a->opts.max_tokens, "Text tokens evaluated (0: all)")->capture_default_str();
  cmd->add_option("--context", a->opts.context, "Tokens per perplexity window")->capture_default_str();
  cmd->add_option("--prompts", a->prompts,
                  "JSONL file of prompts (\"question\" field) for draft acceptance (default: openings of "
                  "paragraphs of Austen's Persuasion)");
  cmd->add_option("--max-prompts", a->opts.max_prompts, "Prompts used from --prompts")->capture_default_str();
  cmd->add_option("--gen-tokens", a->opts.gen_tokens, "Tokens generated per prompt")->capture_default_str();
  cmd->add_option("--draft-k", a->opts.draft_k, "Draft tokens per verification step")->capture_default_str();
  cmd->add_option("--base-cache", a->opts.base_cache_dir,
                  "Directory caching the base's log-probabilities (default: $SELQ_CACHE_DIR/base-logprobs, else "
                  "~/.cache/selq/base-logprobs); the oldest files go when it passes 8 GiB")
      ->capture_default_str();
  cmd->add_flag("--no-base-cache", a->no_base_cache, "Neither read nor write the base cache");
  cmd->add_flag("--json", a->json, "Print JSON on stdout");
  cmd->add_flag("--quiet,-q", a->quiet,
                "No progress (a bar on a terminal; otherwise a line every 30 s with the time left)");
  cmd->callback([a, &status] {
    if (a->no_base_cache) a->opts.base_cache_dir.clear();
    const auto text = runtime::text_or_default(a->text, runtime::DefaultTextUse::Evaluation);
    const auto prompts = runtime::prompts_or_default(a->prompts, a->opts.max_prompts);
    ProgressBar bar("eval", !a->quiet, ProgressBar::Unit::Count,
                    stderr_is_tty() ? ProgressBar::Style::Bar : ProgressBar::Style::Lines);
    a->opts.on_progress = [&bar](const std::string& stage, std::uint64_t done, std::uint64_t total) {
      bar.update(done, total, stage);
    };
    auto rep = runtime::evaluate(a->base, a->quantized, text.text, text.source, prompts.prompts, prompts.source,
                                 a->opts);
    bar.finish();
    if (a->json)
      fmt::print("{}\n", rep.to_json().dump(2));
    else
      fmt::print("{}", rep.table());
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
