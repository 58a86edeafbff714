// `selq text`: the named texts of installed packages (runtime/text/text_sources.h),
// listed or written out, and the default calibration mix. They are what
// --calibration-text takes by name and what docs/QUALITY.md evaluates on.
#include <algorithm>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "io/atomic_file.h"
#include "runtime/text/calibration_text.h"
#include "runtime/text/text_sources.h"

namespace selq::cli {
namespace {

struct TextArgs {
  std::vector<std::string> names;
  std::string out;
  std::size_t max_bytes{0};
  bool list{false};
  bool json{false};
};

void list_sources(bool json) {
  const auto in = [](const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  const auto in_default = [&](const std::string& n) { return in(runtime::default_calibration_sources(), n); };
  const auto held_out = [&](const std::string& n) { return in(runtime::held_out_sources(), n); };
  if (json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& s : runtime::text_sources())
      j.push_back({{"name", s.name}, {"domain", s.domain}, {"what", s.what}, {"install", s.install},
                   {"installed", runtime::text_source_available(s.name)}, {"default_calibration", in_default(s.name)},
                   {"held_out", held_out(s.name)}});
    fmt::print("{}\n", j.dump(2));
    return;
  }
  std::size_t w = 4;
  for (const auto& s : runtime::text_sources()) w = std::max(w, s.name.size());
  for (const auto& s : runtime::text_sources()) {
    const bool have = runtime::text_source_available(s.name);
    fmt::print("{:<{}}  {:<15}  {}{}{}\n", s.name, w, s.domain, s.what,
               in_default(s.name) ? " [default calibration]" : held_out(s.name) ? " [held out]" : "",
               have ? "" : fmt::format(" (not installed: {})", s.install));
  }
}

int run_text(const TextArgs& a) {
  if (a.list || a.names.empty()) {
    list_sources(a.json);
    return 0;
  }
  runtime::DefaultText t;
  if (a.names.size() == 1 && a.names[0] == "calibration") {
    t = runtime::calibration_text({});
  } else if (a.names.size() == 1) {
    t = runtime::read_text_source(a.names[0], a.max_bytes);
  } else {
    std::vector<runtime::DefaultText> parts;
    for (const auto& n : a.names) parts.push_back(runtime::read_text_source(n, a.max_bytes));
    t = runtime::mix_texts(parts, runtime::kCalibrationChunkBytes);
  }
  if (a.out.empty() || a.out == "-") {
    std::fwrite(t.text.data(), 1, t.text.size(), stdout);
  } else {
    io::write_file_atomic(a.out, t.text);
  }
  if (a.json) fmt::print(stderr, "{}\n", nlohmann::json{{"source", t.source}, {"bytes", t.text.size()}}.dump());
  else fmt::print(stderr, "{} bytes of {}\n", t.text.size(), t.source);
  return 0;
}

const CommandRegistration kText(27, [](CLI::App& root, int& status) {
  auto a = std::make_shared<TextArgs>();
  auto* cmd = root.add_subcommand(
      "text",
      "The texts selq reads from installed packages: prose, code, technical prose and an encyclopedia,\n"
      "by name. Without a name, lists them (and whether each is installed). NAME writes that text;\n"
      "several names write them mixed in 2 KiB chunks taken in turn, as --calibration-text mixes them;\n"
      "`calibration` writes the default calibration mix.");
  cmd->footer(
      "Examples:\n"
      "  selq text                                            # the sources, their domains, what is installed\n"
      "  selq text foldoc --max-bytes 65536 -o held-out.txt   # encyclopedia text to evaluate on\n"
      "  selq text calibration -o calib.txt                   # what calibration reads by default\n"
      "  selq quantize CKPT out --recipe llama-nvfp4 --rounding gptq \\\n"
      "      --calibration-text austen/emma --calibration-text code/cpp --calibration-text my-domain.txt");
  cmd->add_option("NAME", a->names, "Text source names (selq text lists them), or `calibration`");
  cmd->add_option("-o,--output", a->out, "Write the text here (default: stdout)");
  cmd->add_option("--max-bytes", a->max_bytes, "At most about this many bytes of each source (0: all)")
      ->capture_default_str();
  cmd->add_flag("--list", a->list, "List the sources");
  cmd->add_flag("--json", a->json, "The listing as JSON on stdout (with a name: the source as JSON on stderr)");
  cmd->callback([a, &status] { status = run_text(*a); });
});

}  // namespace
}  // namespace selq::cli
