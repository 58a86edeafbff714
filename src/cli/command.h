#pragma once
// Subcommands register themselves: each src/cli/cmd_*.cpp defines a static
// CommandRegistration, so adding a subcommand never touches main.cpp.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace selq::cli {

// Called with the root app; adds a subcommand and sets its callback. The
// callback returns the process exit status.
using CommandSetup = std::function<void(CLI::App& root, int& exit_status)>;

struct CommandRegistration {
  CommandRegistration(int order, CommandSetup setup);
};

struct RegisteredCommand {
  int order;
  CommandSetup setup;
};
std::vector<RegisteredCommand>& registered_commands();

// True when stderr is a terminal (progress bars are drawn only then).
bool stderr_is_tty();

}  // namespace selq::cli
