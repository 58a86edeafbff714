// GGUF's tokenizer metadata read into TokenizerParts (docs/GGUF.md §4). Here,
// in the GGUF room, so that text/ (the tokenizer) depends on no file format.
#include "runtime/gguf/gguf_tokenizer.h"

#include <fmt/format.h>

#include "core/error.h"

namespace selq::runtime {
namespace {

PreTokenizer pre_tokenizer_of(const GgufFile& g) {
  const std::string name = g.find("tokenizer.ggml.pre") ? g.get_string("tokenizer.ggml.pre") : "default";
  // llama.cpp's pre-tokenizer names (PreTokenizer says what each means).
  if (name == "smollm") return PreTokenizer::Smollm;
  if (name == "qwen2") return PreTokenizer::Qwen2;
  if (name == "gpt-2" || name == "default") return PreTokenizer::Gpt2;
  throw_unsupported_tokenizer(g.path(), fmt::format("tokenizer.ggml.pre '{}'", name));
}

std::vector<AddedToken> added_tokens_of(const GgufFile& g, const std::vector<std::string>& tokens) {
  std::vector<AddedToken> added;
  if (!g.find("tokenizer.ggml.token_type")) return added;
  const auto& types = g.get_number_array("tokenizer.ggml.token_type");
  if (types.size() != tokens.size())
    throw_bad_input("tokenizer.ggml.token_type and tokenizer.ggml.tokens differ in length", {g.path(), "", {}});
  for (std::size_t i = 0; i < types.size(); ++i)
    if (types[i] == 3 || types[i] == 4)  // control (special) or user-defined added tokens
      added.push_back({static_cast<std::int32_t>(i), tokens[i], types[i] == 3});
  return added;
}

std::vector<std::pair<std::string, std::string>> merges_of(const GgufFile& g) {
  std::vector<std::pair<std::string, std::string>> merges;
  for (const std::string& m : g.get_string_array("tokenizer.ggml.merges")) {
    const auto sp = m.find(' ');
    if (sp == std::string::npos) throw_bad_input(fmt::format("merge '{}' has no space", m), {g.path(), "", {}});
    merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }
  return merges;
}

}  // namespace

Tokenizer tokenizer_from_gguf(const GgufFile& g) {
  const std::string model = g.get_string("tokenizer.ggml.model");
  if (model != "gpt2") throw_unsupported_tokenizer(g.path(), fmt::format("tokenizer.ggml.model '{}'", model));
  TokenizerParts parts;
  parts.pre = pre_tokenizer_of(g);
  parts.tokens = g.get_string_array("tokenizer.ggml.tokens");
  parts.added = added_tokens_of(g, parts.tokens);
  parts.merges = merges_of(g);
  auto id = [&](const char* key) -> std::optional<std::int32_t> {
    auto v = g.get_uint_opt(key);
    if (!v) return std::nullopt;
    if (*v >= parts.tokens.size())
      throw_bad_input(fmt::format("{} = {} is outside the vocabulary", key, *v), {g.path(), "", {}});
    return static_cast<std::int32_t>(*v);
  };
  parts.special = {id("tokenizer.ggml.bos_token_id"), id("tokenizer.ggml.eos_token_id"),
                   id("tokenizer.ggml.unknown_token_id"), id("tokenizer.ggml.padding_token_id")};
  return Tokenizer::from_parts(std::move(parts), g.path());
}

}  // namespace selq::runtime
