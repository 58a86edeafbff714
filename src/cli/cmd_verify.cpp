// `selq verify DIR [--against SRC] [--json]`: exit 0 when clean, 1 on any
// finding, 2 when the input cannot be read (selq::Error, as elsewhere).
#include <fmt/format.h>

#include "cli/command.h"
#include "io/checkpoint.h"
#include "pipeline/verify.h"

namespace selq::cli {
namespace {

struct VerifyArgs {
  std::string path;
  std::string against;
  bool json{false};
};

const CommandRegistration kVerify(45, [](CLI::App& root, int& status) {
  auto args = std::make_shared<VerifyArgs>();
  auto* cmd = root.add_subcommand("verify",
                                  "Check a quantized checkpoint as its readers see it: config vs tensors, manifest\n"
                                  "hashes, every linear resolved by each engine of its dialect, scale values and,\n"
                                  "with --against, the dequantized error against the source.\n"
                                  "Exit status: 0 clean, 1 findings, 2 unreadable input.");
  cmd->footer(
      "Examples:\n"
      "  selq verify out/llama-fp8                          # config vs tensors vs manifest\n"
      "  selq verify out/llama-fp8 --against /models/Llama-3.1-8B --json");
  cmd->add_option("path", args->path, "Checkpoint directory (or .safetensors / index.json)")->required();
  cmd->add_option("--against", args->against, "Source checkpoint to compare dequantized weights against");
  cmd->add_flag("--json", args->json, "Print all findings, per-engine resolution and errors as JSON");
  cmd->callback([args, &status] {
    auto ckpt = io::Checkpoint::open(args->path);
    std::unique_ptr<io::Checkpoint> src;
    pipeline::VerifyOptions opts;
    if (!args->against.empty()) {
      src = io::Checkpoint::open(args->against);
      opts.against = src.get();
    }
    auto r = pipeline::verify_checkpoint(*ckpt, opts);
    if (args->json) {
      fmt::print("{}\n", r.report.dump(2));
    } else {
      for (const auto& f : r.findings) fmt::print("{}\n", pipeline::format_finding(f));
      for (const auto& f : r.notes) fmt::print("note: {}\n", pipeline::format_finding(f));
      fmt::print("verify: {} finding(s){} in {} ({} linear modules, {} quantized modules checked{})\n",
                 r.findings.size(), r.notes.empty() ? "" : fmt::format(", {} note(s)", r.notes.size()), args->path,
                 r.report.value("linear_modules", 0),
                 r.report.value("verified_modules", 0),
                 r.report.value("has_manifest", false) ? ", manifest hashes checked" : ", no manifest");
    }
    status = r.findings.empty() ? 0 : 1;
  });
});

}  // namespace
}  // namespace selq::cli
