#pragma once
// An option's old spelling, kept for one release (docs/ARCHITECTURE.md,
// "Vocabulary"): it sets the same variable, shows under "Deprecated" in
// --help, and warns once on stderr (stdout may be --json) when used.
#include <memory>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

namespace selq::cli {

// Files `opt` (named `old_name`) under "Deprecated", pointing at `new_name`.
inline CLI::Option* mark_deprecated(CLI::Option* opt, const std::string& old_name, const std::string& new_name) {
  opt->group("Deprecated");
  opt->each([old_name, new_name, warned = std::make_shared<bool>(false)](const std::string&) {
    if (!std::exchange(*warned, true))  // once for a list's values
      fmt::print(stderr, "selq: warning: {} is deprecated; use {}\n", old_name, new_name);
  });
  return opt;
}

template <typename T>
CLI::Option* add_deprecated_option(CLI::App* cmd, const std::string& old_name, T& target,
                                   const std::string& new_name) {
  return mark_deprecated(cmd->add_option(old_name, target, "deprecated: use " + new_name), old_name, new_name);
}

inline CLI::Option* add_deprecated_flag(CLI::App* cmd, const std::string& old_name, bool& target,
                                        const std::string& new_name) {
  return mark_deprecated(cmd->add_flag(old_name, target, "deprecated: use " + new_name), old_name, new_name);
}

}  // namespace selq::cli
