#pragma once
// Byte-level BPE tokenizer (GPT-2 style, as used by SmolLM2/Llama-family and
// Qwen2 checkpoints): added tokens matched literally, the model's split
// pattern (PreTokenizer), byte-to-unicode mapping, merges by rank.
// Pipeline and sources: docs/GGUF.md §4. Loads from an HF tokenizer.json or
// from its parts (a GGUF file's tokenizer.ggml.* metadata: runtime/gguf/
// gguf_tokenizer.h), and writes tokenizer.json.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {

struct AddedToken {
  std::int32_t id{0};
  std::string content;
  bool special{true};
};

struct SpecialTokenIds {
  std::optional<std::int32_t> bos, eos, unk, pad;
};

// The split patterns selq implements, by llama.cpp's tokenizer.ggml.pre names.
enum class PreTokenizer {
  // "gpt-2"/"default": 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  // (HF: ByteLevel(use_regex)).
  Gpt2,
  // "smollm": every \p{N} code point isolated first, then the GPT-2 pattern
  // (HF: Sequence[Digits(individual_digits), ByteLevel(use_regex)]).
  Smollm,
  // "qwen2": kQwen2Pattern (HF: Sequence[Split(Isolated), ByteLevel(no regex)]).
  Qwen2,
};

// Qwen2's split pattern exactly as its tokenizer.json (and transformers'
// GGUF loader) spells it; tokenizer.json files are matched against it.
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Splits text into pre-tokens with `kind`'s pattern.
std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer kind);

// Unsupported naming `source`: a tokenizer feature `what` that selq does not
// implement (it implements byte-level BPE only), rather than mis-tokenizing.
[[noreturn]] void throw_unsupported_tokenizer(const std::string& source, const std::string& what);

// What a byte-level BPE tokenizer is made of, whatever file held it.
struct TokenizerParts {
  PreTokenizer pre{PreTokenizer::Gpt2};
  std::vector<std::string> tokens;  // by id
  std::vector<AddedToken> added;
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  SpecialTokenIds special;
};

class Tokenizer {
 public:
  // `source` names the file in error messages.
  static Tokenizer from_tokenizer_json(const nlohmann::json& j, const std::string& source);
  static Tokenizer from_tokenizer_json_file(const std::string& path);
  // Bad input naming `source` when a merge or special id is not in the vocabulary.
  static Tokenizer from_parts(TokenizerParts parts, const std::string& source);

  std::vector<std::int32_t> encode(std::string_view text) const;
  // Concatenated bytes of the tokens (byte-level tokens mapped back to bytes,
  // added tokens verbatim). May be invalid UTF-8 for a partial sequence.
  std::string decode(std::span<const std::int32_t> ids) const;

  // An HF tokenizer.json that `tokenizers` loads and that encodes like this.
  nlohmann::json to_tokenizer_json() const;
  // A byte-level BPE tokenizer of the 256 byte tokens (ids 0-255, GPT-2's
  // byte-to-character map) and no merges, "<|endoftext|>" at 256: every text
  // encodes, one token per byte. For synthetic checkpoints (selq synth).
  static nlohmann::json byte_level_json();

  std::size_t vocab_size() const { return id_to_token_.size(); }
  const std::string& token(std::int32_t id) const { return id_to_token_.at(static_cast<std::size_t>(id)); }
  std::optional<std::int32_t> token_id(std::string_view token) const;
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  const SpecialTokenIds& special_ids() const { return special_; }
  PreTokenizer pre_tokenizer() const { return pre_; }

 private:
  struct Merge {
    std::int32_t rank;
    std::int32_t result;
  };
  void init_vocab(std::vector<std::string> tokens, const std::string& source);
  void add_merge(std::string_view left, std::string_view right, const std::string& source);
  void encode_segment(std::string_view text, std::vector<std::int32_t>& out,
                      std::unordered_map<std::string, std::vector<std::int32_t>>& cache) const;
  void bpe(std::string_view word, std::vector<std::int32_t>& out) const;

  std::vector<std::string> id_to_token_;
  std::unordered_map<std::string, std::int32_t> token_to_id_;
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left id << 32 | right id)
  std::vector<std::pair<std::string, std::string>> merge_list_;  // rank order
  std::int32_t byte_id_[256]{};
  std::vector<AddedToken> added_;
  SpecialTokenIds special_;
  PreTokenizer pre_{PreTokenizer::Smollm};
};

// GPT-2's reversible byte <-> printable code point map.
char32_t byte_to_unicode(std::uint8_t b);
// -1 when `c` is not the image of a byte.
int unicode_to_byte(char32_t c);

}  // namespace selq::runtime
