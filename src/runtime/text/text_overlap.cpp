#include "runtime/text/text_overlap.h"

#include <algorithm>
#include <unordered_set>

#include <fmt/format.h>

#include "core/error.h"
#include "io/xxh3.h"
#include "runtime/text/tokenizer.h"

namespace selq::runtime {
namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::size_t covered_bytes(const Tokenizer& tok, std::span<const std::int32_t> token_ids, std::size_t text_size) {
  return std::min(text_size, tok.decode(token_ids).size());
}

std::vector<Shingle> word_shingles(std::string_view text) {
  std::vector<std::string_view> words;
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < text.size();) {
    while (i < text.size() && is_space(text[i])) ++i;
    const std::size_t b = i;
    while (i < text.size() && !is_space(text[i])) ++i;
    if (i > b) {
      words.push_back(text.substr(b, i - b));
      offsets.push_back(b);
    }
  }
  std::vector<Shingle> out;
  std::string joined;
  for (std::size_t w = 0; w + kShingleWords <= words.size(); ++w) {
    joined.clear();
    for (std::size_t k = 0; k < kShingleWords; ++k) {
      if (k) joined.push_back(' ');
      joined.append(words[w + k]);
    }
    out.push_back({XXH3_64bits(joined.data(), joined.size()), offsets[w]});
  }
  return out;
}

nlohmann::json text_provenance(const std::string& source, std::string_view consumed) {
  std::vector<std::uint64_t> hashes;
  for (const auto& s : word_shingles(consumed)) hashes.push_back(s.hash);
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  nlohmann::json list = nlohmann::json::array();
  for (auto h : hashes) list.push_back(fmt::format("{:016x}", h));
  return {{"source", source}, {"bytes", {0, consumed.size()}}, {"shingle_words", kShingleWords},
          {"shingle_xxh3", list}};
}

void require_disjoint(std::string_view eval_text, const std::string& eval_source, const nlohmann::json& calibration,
                      const std::string& what) {
  const auto it = calibration.find("shingle_xxh3");
  if (it == calibration.end() || !it->is_array() || calibration.value("shingle_words", 0) != kShingleWords) return;
  std::unordered_set<std::uint64_t> cal;
  for (const auto& h : *it)
    if (h.is_string()) cal.insert(std::stoull(h.get<std::string>(), nullptr, 16));
  for (const auto& s : word_shingles(eval_text))
    if (cal.count(s.hash)) {
      std::string words(eval_text.substr(s.offset, 80));
      for (auto& c : words)
        if (is_space(c)) c = ' ';
      throw_bad_input(fmt::format("the evaluation text shares a run of {} words with the calibration of {} ({}), "
                                  "from \"{}...\"; evaluate on text the calibration never saw",
                                  kShingleWords, what, calibration.value("source", std::string("unknown source")),
                                  words),
                      {eval_source, {}, s.offset});
    }
}

}  // namespace selq::runtime
