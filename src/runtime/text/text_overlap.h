#pragma once
// What text a measurement read, so that calibration and evaluation can be
// proved disjoint: the bytes the first N tokens cover, and a fingerprint of
// every run of 16 consecutive words in them (XXH3 of the words joined by one
// space: line breaks and the cut at the last token do not hide an overlap,
// and 16 words are too many for two unrelated texts to share by chance).
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {

class Tokenizer;

// Bytes of a text that `token_ids` (its first tokens) cover: the length of
// their decoding, for byte-level BPE.
std::size_t covered_bytes(const Tokenizer& tok, std::span<const std::int32_t> token_ids, std::size_t text_size);

constexpr std::size_t kShingleWords = 16;

struct Shingle {
  std::uint64_t hash;
  std::size_t offset;  // byte offset of its first word in the text
};
// In text order; none for a text of fewer than kShingleWords words.
std::vector<Shingle> word_shingles(std::string_view text);

// {"source", "bytes": [0, n], "shingle_words": 16, "shingle_xxh3": [hex...]}:
// what a calibration records, and what an evaluation compares against.
nlohmann::json text_provenance(const std::string& source, std::string_view consumed);

// Throws BadInput naming both sources and the byte offset in the evaluation
// text of the first run of words it shares with `calibration` (a
// text_provenance object); `what` names the checkpoint it came with.
void require_disjoint(std::string_view eval_text, const std::string& eval_source,
                      const nlohmann::json& calibration, const std::string& what);

}  // namespace selq::runtime
