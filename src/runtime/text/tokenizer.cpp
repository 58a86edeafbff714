// Byte-level BPE: vocabulary, merges, encode/decode (docs/GGUF.md §4).
#include "runtime/text/tokenizer.h"

#include <algorithm>
#include <fstream>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/text/tokenizer_unicode.h"

namespace selq::runtime {
namespace {

// Bytes that GPT-2 keeps as their own code point; the others are shifted to
// U+0100.. in ascending byte order so that every token is printable.
bool byte_is_printable(unsigned b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct ByteMap {
  char32_t to_cp[256];
  int from_cp[0x200];
  ByteMap() {
    std::fill(std::begin(from_cp), std::end(from_cp), -1);
    char32_t next = 0x100;
    for (unsigned b = 0; b < 256; ++b) {
      to_cp[b] = byte_is_printable(b) ? static_cast<char32_t>(b) : next++;
      from_cp[to_cp[b]] = static_cast<int>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

}  // namespace

char32_t byte_to_unicode(std::uint8_t b) { return byte_map().to_cp[b]; }
int unicode_to_byte(char32_t c) { return c < 0x200 ? byte_map().from_cp[c] : -1; }

void Tokenizer::init_vocab(std::vector<std::string> tokens, const std::string& source) {
  if (tokens.empty()) throw_bad_input("empty vocabulary", {source, "", {}});
  id_to_token_ = std::move(tokens);
  if (id_to_token_.size() > static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max()))
    throw_bad_input("vocabulary too large", {source, "", {}});
  token_to_id_.reserve(id_to_token_.size());
  for (std::size_t i = 0; i < id_to_token_.size(); ++i)
    token_to_id_.emplace(id_to_token_[i], static_cast<std::int32_t>(i));
  for (unsigned b = 0; b < 256; ++b) {
    std::string s;
    unicode::utf8_append(s, byte_to_unicode(static_cast<std::uint8_t>(b)));
    // Real vocabularies lack some bytes (SmolLM2 has no token for 21 of them,
    // e.g. 0x04 and 0xC0): HF's BPE without an unk_token drops such bytes.
    auto it = token_to_id_.find(s);
    byte_id_[b] = it == token_to_id_.end() ? -1 : it->second;
  }
}

void Tokenizer::add_merge(std::string_view left, std::string_view right, const std::string& source) {
  const auto a = token_id(left), b = token_id(right);
  const auto r = token_id(std::string(left) + std::string(right));
  if (!a || !b || !r)
    throw_bad_input(fmt::format("merge '{} {}' uses a token that is not in the vocabulary", left, right),
                    {source, "", {}});
  const auto rank = static_cast<std::int32_t>(merge_list_.size());
  merges_.try_emplace(pair_key(*a, *b), Merge{rank, *r});  // a repeated pair keeps its first rank
  merge_list_.emplace_back(left, right);
}

std::optional<std::int32_t> Tokenizer::token_id(std::string_view token) const {
  auto it = token_to_id_.find(std::string(token));
  if (it == token_to_id_.end()) return std::nullopt;
  return it->second;
}

// Repeatedly merges the adjacent pair of lowest rank (leftmost on ties),
// which is the order HF's priority-queue BPE applies merges in.
void Tokenizer::bpe(std::string_view word, std::vector<std::int32_t>& out) const {
  std::vector<std::int32_t> sym;
  sym.reserve(word.size());
  for (char ch : word)
    if (const std::int32_t id = byte_id_[static_cast<unsigned char>(ch)]; id >= 0) sym.push_back(id);
  while (sym.size() > 1) {
    std::int32_t best_rank = std::numeric_limits<std::int32_t>::max();
    std::size_t best = 0;
    std::int32_t best_result = 0;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges_.find(pair_key(sym[i], sym[i + 1]));
      if (it != merges_.end() && it->second.rank < best_rank) {
        best_rank = it->second.rank;
        best = i;
        best_result = it->second.result;
      }
    }
    if (best_rank == std::numeric_limits<std::int32_t>::max()) break;
    sym[best] = best_result;
    sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), sym.begin(), sym.end());
}

void Tokenizer::encode_segment(std::string_view text, std::vector<std::int32_t>& out,
                               std::unordered_map<std::string, std::vector<std::int32_t>>& cache) const {
  for (std::string_view piece : pretokenize(text, pre_)) {
    auto [it, fresh] = cache.try_emplace(std::string(piece));
    if (fresh) bpe(piece, it->second);
    out.insert(out.end(), it->second.begin(), it->second.end());
  }
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<std::int32_t> out;
  std::unordered_map<std::string, std::vector<std::int32_t>> cache;
  std::size_t seg = 0;
  // Added tokens are found in the raw text first (leftmost, then longest),
  // and the text between them goes through pre-tokenization and BPE.
  for (std::size_t i = 0; i < text.size();) {
    const AddedToken* hit = nullptr;
    for (const auto& a : added_)
      if (!a.content.empty() && text.substr(i, a.content.size()) == a.content &&
          (!hit || a.content.size() > hit->content.size()))
        hit = &a;
    if (!hit) {
      ++i;
      continue;
    }
    encode_segment(text.substr(seg, i - seg), out, cache);
    out.push_back(hit->id);
    i += hit->content.size();
    seg = i;
  }
  encode_segment(text.substr(seg), out, cache);
  return out;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::string out;
  for (std::int32_t id : ids) {
    if (id < 0 || static_cast<std::size_t>(id) >= id_to_token_.size())
      throw_bad_input(fmt::format("token id {} is outside the vocabulary of {}", id, id_to_token_.size()));
    const std::string& tok = id_to_token_[static_cast<std::size_t>(id)];
    // Like HF's ByteLevel decoder: a token whose every code point is a byte
    // image becomes those bytes; any other token is copied as it is.
    std::string bytes;
    bool all_bytes = true;
    for (std::size_t i = 0; i < tok.size() && all_bytes;) {
      char32_t c;
      i += unicode::utf8_decode(tok, i, c);
      const int b = unicode_to_byte(c);
      if (b < 0) all_bytes = false;
      else bytes += static_cast<char>(b);
    }
    out += all_bytes ? bytes : tok;
  }
  return out;
}

}  // namespace selq::runtime
