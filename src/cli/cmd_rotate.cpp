// `selq rotate SRC DST --rotation r1|r1r2`: a rotation folded into a float checkpoint.
#include <fmt/format.h>

#include "cli/command.h"
#include "cli/progress_bar.h"
#include "rotation/rotate_checkpoint.h"

namespace selq::cli {
namespace {

struct RotateArgs {
  std::string source, dst, kind{"r1"};
  std::uint64_t seed{0};
  std::int64_t block{0};
  bool force{false}, quiet{false}, json{false}, f32_linears{false};
};

const CommandRegistration kRotate(35, [](CLI::App& root, int& status) {
  auto a = std::make_shared<RotateArgs>();
  auto* cmd = root.add_subcommand(
      "rotate",
      "Fold an orthogonal rotation into a float checkpoint's weights (QuaRot/SpinQuant R1: the residual\n"
      "stream, every RMSNorm's scale folded into the linears reading it; R2: each attention head's values),\n"
      "so that 4-bit weights and activations lose less to outliers. The output is the same architecture,\n"
      "the same logits within float rounding, loadable by every engine: no online transform. A tied head\n"
      "is written out. Streams tensor by tensor; staged in DST.selq-partial. `selq quantize --rotation`\n"
      "runs this first by itself.");
  cmd->footer(
      "Examples:\n"
      "  selq rotate /models/SmolLM2-135M /tmp/smol-r1 --rotation r1\n"
      "  selq rotate CKPT ROTATED --rotation r1r2 --seed 7 && selq quantize ROTATED out --recipe llama-mxfp4\n"
      "  selq quantize CKPT out --recipe llama-mxfp4 --rotation r1 --rounding gptq   # the same in one step");
  cmd->add_option("source", a->source, "Float checkpoint (directory, .safetensors or index.json)")->required();
  cmd->add_option("destination", a->dst, "Output directory")->required();
  cmd->add_option("--rotation", a->kind, "r1 (the residual stream) or r1r2 (and each head's values); default r1")
      ->check(CLI::IsMember({"r1", "r1r2"}));
  cmd->add_option("--seed", a->seed, "Seed of the random signs (and of a random factor where no Hadamard fits)")
      ->capture_default_str();
  cmd->add_option("--block", a->block,
                  "Rotate the residual stream in independent runs of this many channels (32: an MX group's),\n"
                  "a block-diagonal Hadamard; 0 (default) one rotation of the whole hidden size")
      ->capture_default_str();
  cmd->add_flag("--f32-linears", a->f32_linears,
                "Write the layers' rotated linears in F32 rather than the source's dtype (BF16's rounding of\n"
                "every rotated weight is the rotation's only error: SmolLM2-135M KL 2.9e-4 in BF16, 2.9e-5 so)");
  cmd->add_flag("--force", a->force, "Replace DST if it exists");
  cmd->add_flag("--quiet,-q", a->quiet, "No progress bar or summary");
  cmd->add_flag("--json", a->json, "Print the rotation record (selq-rotation.json) and timings as JSON");
  cmd->callback([a, &status] {
    rotation::RotateOptions o;
    o.kind = rotation::parse_rotation_kind(a->kind, "--rotation");
    o.seed = a->seed;
    o.block = a->block;
    o.overwrite = a->force;
    o.f32_linears = a->f32_linears;
    ProgressBar bar("rotate", !a->quiet && !a->json && stderr_is_tty(), ProgressBar::Unit::Count);
    o.on_progress = [&bar](std::size_t done, std::size_t total) { bar.update(done, total); };
    const auto r = rotation::rotate_checkpoint(a->source, a->dst, o);
    bar.finish();
    if (a->json) {
      fmt::print("{}\n", nlohmann::json{{"destination", a->dst},
                                        {"record", r.record},
                                        {"seconds", r.seconds},
                                        {"bytes_read", r.bytes_read},
                                        {"bytes_written", r.bytes_written}}
                             .dump(2));
    } else if (!a->quiet) {
      fmt::print("wrote {} ({} rotation, residual {}, {} in {:.1f}s){}\n", a->dst, r.record["rotation"].get<std::string>(),
                 r.record["residual"]["construction"].get<std::string>(), human_bytes(static_cast<double>(r.bytes_written)),
                 r.seconds, r.record["head_written"].get<bool>() ? "; the tied head is written out as lm_head.weight" : "");
    }
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
