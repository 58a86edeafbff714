#pragma once
// --calibration-text, as every command that calibrates takes it: files,
// directories or text source names (`selq text`), repeatable; the default
// is the mix of domains in runtime/text/calibration_text.h.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace selq::cli {

inline CLI::Option* add_calibration_text_option(CLI::App* cmd, std::vector<std::string>& target,
                                                const std::string& what) {
  return cmd->add_option(
      "--calibration-text", target,
      what + ": a UTF-8 file, a directory of them or a text source name (`selq text` lists them); several are "
             "mixed in 2 KiB chunks taken in turn. Default: a mix of prose (Austen's Sense and Sensibility), "
             "code (Python's standard library) and technical prose (Linux man-pages), none of which `selq "
             "eval`'s default text overlaps (docs/RECIPES.md, \"Calibration text\")");
}

}  // namespace selq::cli
