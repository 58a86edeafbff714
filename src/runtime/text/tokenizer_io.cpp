// Loading a tokenizer from HF tokenizer.json or from its parts, and writing
// tokenizer.json. Only the byte-level BPE pipeline selq implements is
// accepted; anything else is rejected rather than silently mis-tokenized.
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_unicode.h"

namespace selq::runtime {
namespace {

using nlohmann::json;

bool is_byte_level(const json& p, bool use_regex) {
  return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == use_regex &&
         !p.value("add_prefix_space", false);
}

// Qwen2's Split: the pattern must be kQwen2Pattern, character for character;
// any other regex would need its own scanner in tokenizer_pretok.cpp.
bool is_qwen2_split(const json& p) {
  return p.is_object() && p.value("type", "") == "Split" && p.contains("pattern") &&
         p["pattern"].is_object() && p["pattern"].value("Regex", "") == kQwen2Pattern &&
         p.value("behavior", "") == "Isolated" && !p.value("invert", false);
}

PreTokenizer parse_pre_tokenizer(const json& p, const std::string& source) {
  if (is_byte_level(p, true)) return PreTokenizer::Gpt2;
  if (p.is_object() && p.value("type", "") == "Sequence" && p.contains("pretokenizers")) {
    const json& seq = p["pretokenizers"];
    if (seq.size() == 2 && seq[0].value("type", "") == "Digits" &&
        seq[0].value("individual_digits", false) && is_byte_level(seq[1], true))
      return PreTokenizer::Smollm;
    if (seq.size() == 2 && is_qwen2_split(seq[0]) && is_byte_level(seq[1], false)) return PreTokenizer::Qwen2;
  }
  throw_unsupported_tokenizer(source, "pre_tokenizer " + p.dump().substr(0, 200));
}

void check_model(const json& m, const std::string& source) {
  if (!m.is_object() || m.value("type", "") != "BPE") throw_unsupported_tokenizer(source, "model is not BPE");
  auto is_null_or = [&](const char* k, auto ok) { return !m.contains(k) || m[k].is_null() || ok(m[k]); };
  if (!is_null_or("dropout", [](const json&) { return false; })) throw_unsupported_tokenizer(source, "BPE dropout");
  if (!is_null_or("continuing_subword_prefix", [](const json& v) { return v == ""; }) ||
      !is_null_or("end_of_word_suffix", [](const json& v) { return v == ""; }))
    throw_unsupported_tokenizer(source, "subword prefix/suffix");
  if (m.value("byte_fallback", false)) throw_unsupported_tokenizer(source, "byte_fallback");
  if (m.value("ignore_merges", false)) throw_unsupported_tokenizer(source, "ignore_merges");
}

std::vector<std::string> vocab_by_id(const json& vocab, std::size_t min_size, const std::string& source) {
  std::vector<std::string> tokens(min_size);
  for (const auto& [tok, idj] : vocab.items()) {
    const auto id = idj.get<std::int64_t>();
    if (id < 0 || id > 10'000'000) throw_bad_input(fmt::format("token id {} out of range", id), {source, "", {}});
    if (static_cast<std::size_t>(id) >= tokens.size()) tokens.resize(static_cast<std::size_t>(id) + 1);
    tokens[static_cast<std::size_t>(id)] = tok;
  }
  return tokens;
}

}  // namespace

void throw_unsupported_tokenizer(const std::string& source, const std::string& what) {
  throw_unsupported(fmt::format("tokenizer: {} (selq implements byte-level BPE only)", what), {source, "", {}});
}

Tokenizer Tokenizer::from_tokenizer_json(const json& j, const std::string& source) {
  try {
    Tokenizer t;
    if (j.contains("normalizer") && !j["normalizer"].is_null()) throw_unsupported_tokenizer(source, "a normalizer");
    t.pre_ = parse_pre_tokenizer(j.at("pre_tokenizer"), source);
    const json& m = j.at("model");
    check_model(m, source);
    std::size_t n = 0;
    for (const auto& a : j.value("added_tokens", json::array()))
      n = std::max(n, a.at("id").get<std::size_t>() + 1);
    std::vector<std::string> tokens = vocab_by_id(m.at("vocab"), n, source);
    for (const auto& a : j.value("added_tokens", json::array())) {
      AddedToken at{a.at("id").get<std::int32_t>(), a.at("content").get<std::string>(), a.value("special", false)};
      tokens[static_cast<std::size_t>(at.id)] = at.content;
      t.added_.push_back(std::move(at));
    }
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i].empty()) throw_bad_input(fmt::format("no token has id {}", i), {source, "", {}});
    t.init_vocab(std::move(tokens), source);
    for (const auto& mg : m.at("merges")) {
      if (mg.is_array() && mg.size() == 2) {
        t.add_merge(mg[0].get<std::string>(), mg[1].get<std::string>(), source);
        continue;
      }
      const auto s = mg.get<std::string>();
      const auto sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        throw_bad_input(fmt::format("merge '{}' is not two tokens separated by one space", s), {source, "", {}});
      t.add_merge(s.substr(0, sp), s.substr(sp + 1), source);
    }
    return t;
  } catch (const json::exception& e) {
    throw_bad_input(fmt::format("malformed tokenizer.json: {}", e.what()), {source, "", {}});
  }
}

Tokenizer Tokenizer::from_tokenizer_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("cannot open", {path, "", {}});
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw_bad_input("tokenizer.json is not valid JSON", {path, "", {}});
  return from_tokenizer_json(j, path);
}

Tokenizer Tokenizer::from_parts(TokenizerParts parts, const std::string& source) {
  Tokenizer t;
  t.pre_ = parts.pre;
  t.added_ = std::move(parts.added);
  t.init_vocab(std::move(parts.tokens), source);
  for (const auto& [left, right] : parts.merges) t.add_merge(left, right, source);
  auto in_vocabulary = [&](const char* what, std::optional<std::int32_t> id) {
    if (id && (*id < 0 || static_cast<std::size_t>(*id) >= t.vocab_size()))
      throw_bad_input(fmt::format("{} token id {} is outside the vocabulary", what, *id), {source, "", {}});
    return id;
  };
  t.special_ = {in_vocabulary("bos", parts.special.bos), in_vocabulary("eos", parts.special.eos),
                in_vocabulary("unknown", parts.special.unk), in_vocabulary("padding", parts.special.pad)};
  return t;
}

json Tokenizer::byte_level_json() {
  Tokenizer t;
  t.pre_ = PreTokenizer::Gpt2;
  std::vector<std::string> tokens(257);
  for (int b = 0; b < 256; ++b) unicode::utf8_append(tokens[static_cast<std::size_t>(b)], byte_to_unicode(static_cast<std::uint8_t>(b)));
  tokens[256] = "<|endoftext|>";
  t.added_.push_back({256, tokens[256], true});
  t.init_vocab(std::move(tokens), "byte-level tokenizer");
  return t.to_tokenizer_json();
}

json Tokenizer::to_tokenizer_json() const {
  json added = json::array();
  for (const auto& a : added_)
    added.push_back({{"id", a.id}, {"content", a.content}, {"single_word", false}, {"lstrip", false},
                     {"rstrip", false}, {"normalized", false}, {"special", a.special}});
  // trim_offsets (offsets only, never ids) as SmolLM2's and Qwen2's own files set it.
  auto byte_level = [](bool use_regex) {
    return json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", use_regex},
                {"use_regex", use_regex}};
  };
  json pre;
  switch (pre_) {
    case PreTokenizer::Gpt2: pre = byte_level(true); break;
    case PreTokenizer::Smollm:
      pre = {{"type", "Sequence"},
             {"pretokenizers", json::array({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)})}};
      break;
    case PreTokenizer::Qwen2:
      // As Qwen2's own tokenizer.json, less its NFC normalizer: neither selq
      // nor llama.cpp (whose GGUF has no normalizer key) applies one.
      pre = {{"type", "Sequence"},
             {"pretokenizers",
              json::array({{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"},
                            {"invert", false}},
                           byte_level(false)})}};
      break;
  }
  json vocab = json::object();
  for (std::size_t i = 0; i < id_to_token_.size(); ++i) vocab[id_to_token_[i]] = i;
  json merges = json::array();
  for (const auto& [l, r] : merge_list_) merges.push_back(l + " " + r);  // byte-level tokens never hold a space
  json model = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
                {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  return {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr},
          {"added_tokens", std::move(added)}, {"normalizer", nullptr}, {"pre_tokenizer", std::move(pre)},
          {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}}},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model", std::move(model)}};
}

}  // namespace selq::runtime
