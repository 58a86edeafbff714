#include "serve/tokenizer_config.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/text/chatml.h"

namespace selq::serve {
namespace {

// A special token is a string or, in older configs, {"content": string, ...}.
std::string token_text(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "";
  const auto& v = j[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

TokenizerConfig read_tokenizer_config(const std::string& checkpoint_dir) {
  TokenizerConfig t;
  std::ifstream f(std::filesystem::path(checkpoint_dir) / "tokenizer_config.json");
  if (!f) return t;
  const auto j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return t;
  if (j.contains("chat_template") && j["chat_template"].is_string()) t.chat_template = j["chat_template"].get<std::string>();
  t.chatml = t.chat_template.find(runtime::kImStart) != std::string::npos &&
             t.chat_template.find(runtime::kImEnd) != std::string::npos;
  t.bos_token = token_text(j, "bos_token");
  t.eos_token = token_text(j, "eos_token");
  t.pad_token = token_text(j, "pad_token");
  return t;
}

}  // namespace selq::serve
