// Pre-tokenization: the GPT-2 and Qwen2 split patterns matched by hand on code points.
// std::regex cannot express \p{L}/\p{N} (and matches bytes, not code points),
// so each alternative of the pattern is a small scanner over the Unicode
// tables in tokenizer_unicode.cpp, tried in the pattern's order.
#include <algorithm>

#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_unicode.h"

namespace selq::runtime {
namespace unicode {

namespace {
bool in_ranges(std::span<const CodepointRange> rs, char32_t c) {
  auto it = std::upper_bound(rs.begin(), rs.end(), c,
                             [](char32_t v, const CodepointRange& r) { return v < r.first; });
  return it != rs.begin() && c <= std::prev(it)->last;
}
}  // namespace

bool is_letter(char32_t c) {
  if (c < 0x80) return (c | 0x20) >= 'a' && (c | 0x20) <= 'z';
  return in_ranges(letter_ranges(), c);
}
bool is_number(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(number_ranges(), c);
}
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::size_t utf8_decode(std::string_view s, std::size_t i, char32_t& out) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  auto cont = [&](std::size_t k) {
    return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
  };
  auto bits = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (b0 < 0x80) { out = b0; return 1; }
  if ((b0 & 0xE0) == 0xC0 && b0 >= 0xC2 && cont(1)) {
    out = (static_cast<char32_t>(b0 & 0x1F) << 6) | bits(1);
    return 2;
  }
  if ((b0 & 0xF0) == 0xE0 && cont(1) && cont(2)) {
    out = (static_cast<char32_t>(b0 & 0x0F) << 12) | (bits(1) << 6) | bits(2);
    if (out >= 0x800 && (out < 0xD800 || out > 0xDFFF)) return 3;
  } else if ((b0 & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    out = (static_cast<char32_t>(b0 & 0x07) << 18) | (bits(1) << 12) | (bits(2) << 6) | bits(3);
    if (out >= 0x10000 && out <= 0x10FFFF) return 4;
  }
  out = 0xFFFD;
  return 1;
}

void utf8_append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

}  // namespace unicode

namespace {

using unicode::is_letter;
using unicode::is_number;
using unicode::is_whitespace;

bool is_other(char32_t c) { return !is_whitespace(c) && !is_letter(c) && !is_number(c); }

// Length in code points of 's|'t|'re|'ve|'m|'ll|'d at i, or 0; with
// `any_case` (Qwen2's `(?i:...)`) ASCII letters of either case match, which is
// all the case folding `tokenizers` applies there ('ſ is not 's).
std::size_t match_contraction(const std::vector<char32_t>& cp, std::size_t i, std::size_t end, bool any_case) {
  if (cp[i] != U'\'' || i + 1 >= end) return 0;
  auto lower = [&](char32_t c) { return any_case && c >= U'A' && c <= U'Z' ? c + 32 : c; };
  const char32_t n = lower(cp[i + 1]);
  if (n == U's' || n == U't' || n == U'm' || n == U'd') return 2;
  if (i + 2 >= end) return 0;
  const char32_t n2 = lower(cp[i + 2]);
  if ((n == U'r' && n2 == U'e') || (n == U'v' && n2 == U'e') || (n == U'l' && n2 == U'l')) return 3;
  return 0;
}

// ` ?CLASS+` at i: an optional ASCII space, then a non-empty run of CLASS.
template <class Pred>
std::size_t match_class_run(const std::vector<char32_t>& cp, std::size_t i, std::size_t end, Pred pred) {
  std::size_t k = cp[i] == U' ' ? i + 1 : i;
  if (k >= end || !pred(cp[k])) return 0;
  while (k < end && pred(cp[k])) ++k;
  return k - i;
}

// `\s+(?!\S)|\s+`: a whitespace run; when a non-space follows it, the last
// space is left to prefix the next word (unless the run is a single space).
std::size_t match_whitespace(const std::vector<char32_t>& cp, std::size_t i, std::size_t end) {
  std::size_t j = i;
  while (j < end && is_whitespace(cp[j])) ++j;
  const std::size_t run = j - i;
  if (run == 0) return 0;
  if (j == end || run == 1) return run;
  return run - 1;
}

std::size_t match_gpt2(const std::vector<char32_t>& cp, std::size_t i, std::size_t end) {
  if (std::size_t n = match_contraction(cp, i, end, false)) return n;
  if (std::size_t n = match_class_run(cp, i, end, is_letter)) return n;
  if (std::size_t n = match_class_run(cp, i, end, is_number)) return n;
  if (std::size_t n = match_class_run(cp, i, end, is_other)) return n;
  if (std::size_t n = match_whitespace(cp, i, end)) return n;
  return 1;  // unreachable: every code point is in one of the classes
}

bool is_cr_lf(char32_t c) { return c == U'\r' || c == U'\n'; }

// Qwen2's pattern, alternative by alternative (the first that matches wins,
// as in the regex engine; each comment is the alternative it implements).
std::size_t match_qwen2(const std::vector<char32_t>& cp, std::size_t i, std::size_t end) {
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)
  if (std::size_t n = match_contraction(cp, i, end, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+ : one optional prefix code point (a space, tab,
  // or punctuation, never a newline), then letters.
  {
    std::size_t k = i;
    if (!is_letter(cp[k]) && !is_number(cp[k]) && !is_cr_lf(cp[k]) && k + 1 < end && is_letter(cp[k + 1])) ++k;
    if (is_letter(cp[k])) {
      while (k < end && is_letter(cp[k])) ++k;
      return k - i;
    }
  }
  // \p{N} : one code point, so numbers go digit by digit.
  if (is_number(cp[i])) return 1;
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  if (std::size_t n = match_class_run(cp, i, end, is_other)) {
    std::size_t k = i + n;
    while (k < end && is_cr_lf(cp[k])) ++k;
    return k - i;
  }
  // `\s*[\r\n]+` : greedy `\s*` backs off to the run's last CR or LF, which
  // `[\r\n]+` then takes; so the piece ends at the last newline of the run.
  {
    std::size_t j = i, last_nl = end;
    while (j < end && is_whitespace(cp[j])) {
      if (is_cr_lf(cp[j])) last_nl = j;
      ++j;
    }
    if (last_nl != end) return last_nl + 1 - i;
  }
  // `\s+(?!\S)|\s+`
  if (std::size_t n = match_whitespace(cp, i, end)) return n;
  return 1;  // unreachable: every code point is in one of the classes
}

}  // namespace

std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer kind) {
  std::vector<char32_t> cp;
  std::vector<std::size_t> byte_at;  // byte offset of each code point, plus the end
  for (std::size_t i = 0; i < text.size();) {
    char32_t c;
    byte_at.push_back(i);
    i += unicode::utf8_decode(text, i, c);
    cp.push_back(c);
  }
  byte_at.push_back(text.size());
  std::vector<std::string_view> out;
  auto emit = [&](std::size_t a, std::size_t b) { out.push_back(text.substr(byte_at[a], byte_at[b] - byte_at[a])); };
  auto split_regex = [&](std::size_t a, std::size_t b) {
    for (std::size_t i = a; i < b;) {
      const std::size_t n = kind == PreTokenizer::Qwen2 ? match_qwen2(cp, i, b) : match_gpt2(cp, i, b);
      emit(i, i + n);
      i += n;
    }
  };
  std::size_t start = 0;
  for (std::size_t i = 0; i < cp.size(); ++i) {
    if (kind != PreTokenizer::Smollm || !is_number(cp[i])) continue;
    split_regex(start, i);
    emit(i, i + 1);
    start = i + 1;
  }
  split_regex(start, cp.size());
  return out;
}

}  // namespace selq::runtime
