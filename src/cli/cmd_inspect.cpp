// `selq inspect PATH`: what is in a checkpoint.
#include <fmt/format.h>

#include "cli/command.h"
#include "io/checkpoint.h"
#include "pipeline/inspect.h"

namespace selq::cli {
namespace {

struct InspectArgs {
  std::string path;
  bool json{false};
  bool tensors{false};
};

const CommandRegistration kInspect(10, [](CLI::App& root, int& status) {
  auto args = std::make_shared<InspectArgs>();
  auto* cmd = root.add_subcommand("inspect",
                                  "Show what a checkpoint holds: tensors by dtype, a per-layer map of which\n"
                                  "projection is stored in which format, and its quantization_config.");
  cmd->footer(
      "Examples:\n"
      "  selq inspect /models/Llama-3.1-8B                 # formats, sizes, shards\n"
      "  selq inspect model.safetensors --tensors --json  # every tensor, for scripts\n"
      "  selq inspect https://host/ckpt/                  # headers by HTTP range");
  cmd->add_option("path", args->path, "A .safetensors file, a checkpoint directory, or an index.json")->required();
  cmd->add_flag("--json", args->json, "Print JSON for scripts");
  cmd->add_flag("--tensors", args->tensors, "List every tensor with dtype, shape and bytes");
  cmd->callback([args, &status] {
    auto ckpt = io::Checkpoint::open(args->path);
    auto j = pipeline::inspect_checkpoint(*ckpt, args->tensors);
    if (args->json)
      fmt::print("{}\n", j.dump(2));
    else
      fmt::print("{}", pipeline::format_inspection(j, args->tensors));
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
