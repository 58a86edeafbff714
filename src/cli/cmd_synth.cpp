// `selq synth --arch A DST`: a synthetic checkpoint with a real architecture's names.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/command.h"
#include "cli/plan_args.h"
#include "cli/progress_bar.h"
#include "core/error.h"
#include "pipeline/synth.h"
#include "runtime/text/tokenizer.h"

namespace selq::cli {
namespace {

struct SynthArgs {
  pipeline::SynthOptions options;
  std::string dst;
  std::string max_shard_size{"1GB"};
  bool json{false};
};

const CommandRegistration kSynth(80, [](CLI::App& root, int& status) {
  auto args = std::make_shared<SynthArgs>();
  auto* cmd = root.add_subcommand(
      "synth",
      "Write a synthetic checkpoint with a real architecture's tensor names and (optionally\n"
      "scaled-down) shapes; weights have per-channel scale spread and heavy-tailed outliers.\n"
      "dspark at --scale 1 has the published shapes (hidden 7168, o_proj 7168x8192); deepseek-v3\n"
      "at --scale 1 has DeepSeek-V3's (128 heads; its router: 8 groups, 4 of them chosen, 8\n"
      "experts per token, as far as --experts allows); kimi-k2 is DeepSeek-V3's code under model_type\n"
      "kimi_k2 with Kimi-K2's 64 heads and router (one group, 8 experts per token at --scale 1).");
  cmd->footer(
      "Examples:\n"
      "  selq synth --arch dspark --scale 8 /tmp/dspark     # a 5-layer draft model, 1/8 scale\n"
      "  selq synth --arch kimi-k3 --scale 64 /tmp/k3       # MoE names and shapes, scaled down\n"
      "  selq synth --arch deepseek-v3 --layers 2 --experts 256 --vocab 32000 /tmp/layer\n"
      "                      # a dense layer and one real-size MoE layer (23 GB)\n"
      "  selq synth --arch kimi-k2 --layers 2 --experts 384 --vocab 32000 /tmp/k2layer   # 34 GB");
  std::vector<std::string> arch_names, runnable;
  for (const auto& a : pipeline::synth_architectures()) {
    arch_names.emplace_back(a.name);
    if (a.with_tokenizer) runnable.emplace_back(a.name);
  }
  cmd->add_option("--arch", args->options.arch,
                  fmt::format("{} ({} come with their router and RoPE config and a\n"
                              "byte-level tokenizer.json: selq's runtime and transformers run them)",
                              pipeline::synth_architecture_names(), fmt::join(runnable, " and ")))
      ->check(CLI::IsMember(arch_names))
      ->required();
  cmd->add_option("destination", args->dst, "Output directory (must not exist)")->required();
  cmd->add_option("--scale", args->options.scale, "Divide hidden/intermediate/rank sizes by this (default 1)");
  cmd->add_option("--layers", args->options.layers, "Number of layers (default: the arch's)");
  cmd->add_option("--experts", args->options.experts, "Routed experts per MoE layer (default 8)");
  cmd->add_option("--vocab", args->options.vocab, "Vocabulary size (default: the arch's, scaled)");
  cmd->add_option("--seed", args->options.seed, "Random seed (default 1)");
  cmd->add_option("--max-shard-size", args->max_shard_size, "Shard size cap (default 1GB)");
  cmd->add_flag("--experts-nvfp4", args->options.experts_nvfp4,
                "Store routed experts pre-quantized as compressed-tensors NVFP4 (with its quantization_config)");
  cmd->add_flag("--json", args->json, "Print a JSON summary");
  cmd->callback([args, &status] {
    args->options.max_shard_bytes = parse_size(args->max_shard_size);
    // What selq's runtime runs (eval, calibrate, the runtime tiers) gets a tokenizer.
    if (pipeline::synth_architecture(args->options.arch).with_tokenizer) {
      if (args->options.vocab >= 0 && args->options.vocab < 257)
        throw_bad_input(fmt::format("--arch {} needs --vocab of at least 257 (its byte-level tokenizer's 256 bytes and "
                                    "<|endoftext|>)",
                                    args->options.arch));
      args->options.extra_files["tokenizer.json"] = runtime::Tokenizer::byte_level_json().dump();
    }
    const std::uint64_t bytes = pipeline::write_synth_checkpoint(args->options, args->dst);
    if (args->json)
      fmt::print("{}\n", nlohmann::json{{"destination", args->dst}, {"arch", args->options.arch}, {"bytes", bytes}}.dump(2));
    else
      fmt::print("wrote {} ({} {}, scale 1/{})\n", args->dst, human_bytes(static_cast<double>(bytes)),
                 args->options.arch, args->options.scale);
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
