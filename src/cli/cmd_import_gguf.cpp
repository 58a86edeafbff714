// `selq import-gguf FILE DST`: a Llama GGUF as an HF-style BF16 checkpoint.
#include <memory>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/deprecated_alias.h"
#include "runtime/gguf/import_gguf.h"

namespace selq::cli {
namespace {

struct ImportGgufArgs {
  std::string file, dst;
  bool json = false, force = false;
};

int run_import_gguf(const ImportGgufArgs& a) {
  const auto rep = runtime::import_gguf(a.file, a.dst, {a.force});
  if (a.json) {
    fmt::print("{}\n", rep.to_json().dump(2));
    return 0;
  }
  std::string types;
  for (const auto& [t, n] : rep.source_types) types += fmt::format(" {} x{}", t, n);
  const auto& c = rep.config;
  fmt::print("imported {} tensors ({}) from {}\n", rep.tensors, types.substr(1), rep.source);
  fmt::print("wrote {}/model.safetensors: {:.1f} MB BF16; config: {} layers, hidden {}, {}/{} heads, vocab {}\n",
             rep.destination, static_cast<double>(rep.bytes_written) / 1e6, c["num_hidden_layers"].get<int>(),
             c["hidden_size"].get<int>(), c["num_attention_heads"].get<int>(),
             c["num_key_value_heads"].get<int>(), c["vocab_size"].get<int>());
  fmt::print("note: the baseline carries the GGUF's quantization rounding (see {}/README.md)\n", rep.destination);
  fmt::print("took {:.2f} s\n", rep.seconds);
  return 0;
}

const CommandRegistration kRegistration(70, [](CLI::App& root, int& exit_status) {
  auto args = std::make_shared<ImportGgufArgs>();
  auto* cmd = root.add_subcommand("import-gguf", "Write a Llama GGUF model as BF16 safetensors with HF config and tokenizer");
  cmd->footer(
      "Examples:\n"
      "  selq import-gguf SmolLM2-135M-Instruct.Q4_1.gguf /tmp/smollm2-bf16");
  cmd->add_option("FILE", args->file, "GGUF file")->required()->check(CLI::ExistingFile);
  cmd->add_option("DST", args->dst, "output directory")->required();
  cmd->add_flag("--json", args->json, "print the result as JSON");
  cmd->add_flag("--force", args->force, "replace an existing model.safetensors in DST");
  add_deprecated_flag(cmd, "--overwrite", args->force, "--force");
  cmd->callback([args, &exit_status] { exit_status = run_import_gguf(*args); });
});

}  // namespace
}  // namespace selq::cli
