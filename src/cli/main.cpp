// selq command-line entry point: builds the CLI11 app from the registered
// subcommands, runs one, and turns selq::Error into a single line on stderr.

#include <algorithm>
#include <cstdio>
#include <unistd.h>

#include <fmt/format.h>

#include "cli/command.h"
#include "cli/error_hint.h"
#include "core/error.h"
#include "dist/ranks.h"

namespace selq::cli {

std::vector<RegisteredCommand>& registered_commands() {
  static std::vector<RegisteredCommand> commands;
  return commands;
}

CommandRegistration::CommandRegistration(int order, CommandSetup setup) {
  registered_commands().push_back({order, std::move(setup)});
}

bool stderr_is_tty() { return isatty(fileno(stderr)) != 0; }

}  // namespace selq::cli

int main(int argc, char** argv) {
  // Under mpirun or srun, one rank of the job (a plain run is the only one).
  try {
    selq::dist::init(argc, argv);
  } catch (const selq::Error& e) {
    fmt::print(stderr, "selq: error: {}\n", e.what());
    return e.exit_code();
  }
  CLI::App app{
      "selq: selective mixed-precision post-training quantization of LLM checkpoints.\n"
      "Reads safetensors checkpoints, decides a format per tensor from a recipe, writes\n"
      "the quantized checkpoint with the quantization_config a serving engine reads."};
  app.set_version_flag("--version", std::string("selq ") + SELQ_VERSION);
  app.require_subcommand(1);
  app.footer(
      "Start here:\n"
      "  selq recipes                                   the shipped recipes, by name\n"
      "  selq plan CKPT --recipe llama-fp8              what each tensor would become (dry run)\n"
      "  selq quantize CKPT OUT --recipe llama-fp8      quantize, with config, manifest and report\n"
      "  selq verify OUT --against CKPT                 check it as each engine reads it\n"
      "  selq demo                                      SmolLM2-135M quantized five ways and evaluated\n"
      "Each subcommand has --help with examples.");
  int exit_status = 0;
  auto commands = selq::cli::registered_commands();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.order < b.order; });
  for (auto& c : commands) c.setup(app, exit_status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const selq::Error& e) {
    fmt::print(stderr, "selq: error: {}{}{}\n", selq::dist::rank_prefix(), e.what(), selq::cli::hint_suffix(e.hint()));
    if (selq::dist::distributed()) selq::dist::ranks().abort(e.exit_code());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "selq: internal error: {}{}\n", selq::dist::rank_prefix(), e.what());
    if (selq::dist::distributed()) selq::dist::ranks().abort(1);
    return 1;
  }
  return exit_status;
}
