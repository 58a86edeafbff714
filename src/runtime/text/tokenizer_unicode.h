#pragma once
// Unicode classes for the byte-level BPE pre-tokenizer. std::regex has no
// \p{L}/\p{N} and works on bytes, not code points, so the GPT-2 split pattern
// is matched by hand (tokenizer_pretok.cpp) against these tables.
#include <cstdint>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace selq::runtime::unicode {

struct CodepointRange {
  char32_t first;
  char32_t last;  // inclusive
};

std::span<const CodepointRange> letter_ranges();  // general category L*
std::span<const CodepointRange> number_ranges();  // general category N*

bool is_letter(char32_t c);
bool is_number(char32_t c);
// The Unicode White_Space property (what \s matches in the reference regex
// engine and Rust's char::is_whitespace).
bool is_whitespace(char32_t c);

// Decodes one UTF-8 sequence at s[i]; returns its length (1 for an invalid
// byte, which then stands for itself as U+FFFD).
std::size_t utf8_decode(std::string_view s, std::size_t i, char32_t& out);
void utf8_append(std::string& out, char32_t c);

}  // namespace selq::runtime::unicode
