#include "io/strict_json.h"

#include <iterator>
#include <set>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::io {
namespace {

using nlohmann::json;

// nlohmann's SAX interface reports no positions except for syntax errors, so
// the input iterator records how far the lexer has read. The lexer never reads
// ahead past a string token, so at key() time this is just past the key.
struct TrackingIter {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  const char* p{nullptr};
  const char** high{nullptr};

  reference operator*() const { return *p; }
  TrackingIter& operator++() {
    ++p;
    *high = p;
    return *this;
  }
  TrackingIter operator++(int) {
    TrackingIter t = *this;
    ++*this;
    return t;
  }
  bool operator==(const TrackingIter& o) const { return p == o.p; }
  bool operator!=(const TrackingIter& o) const { return p != o.p; }
};

class DomBuilder {
 public:
  DomBuilder(StrictJson& out, const char* base, const char** high)
      : out_(out), base_(base), high_(high) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const std::string&) { return put(json(v)); }
  bool string(std::string& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }

  bool start_object(std::size_t) {
    put(json::object());
    keys_.emplace_back();
    return true;
  }
  bool key(std::string& k) {
    const std::uint64_t end = static_cast<std::uint64_t>(*high_ - base_);
    const std::uint64_t start = end >= k.size() + 2 ? end - k.size() - 2 : 0;
    if (!keys_.back().insert(k).second) {
      has_dup_ = true;
      dup_top_ = stack_.size() == 1;
      dup_key_ = k;
      dup_pos_ = start;
      return false;
    }
    if (stack_.size() == 1) out_.top_key_pos[k] = start;
    pending_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    keys_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    put(json::array());
    return true;
  }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) {
    err_pos_ = pos > 0 ? pos - 1 : 0;
    err_ = e.what();
    return false;
  }

  bool has_dup_{false}, dup_top_{false};
  std::string dup_key_, err_;
  std::uint64_t dup_pos_{0}, err_pos_{0};

 private:
  bool put(json&& v) {
    json* slot;
    if (stack_.empty()) {
      out_.value = std::move(v);
      slot = &out_.value;
    } else if (stack_.back()->is_array()) {
      stack_.back()->push_back(std::move(v));
      slot = &stack_.back()->back();
    } else {
      *pending_ = std::move(v);
      slot = pending_;
    }
    if (slot->is_object() || slot->is_array()) stack_.push_back(slot);
    return true;
  }

  StrictJson& out_;
  const char* base_;
  const char** high_;
  std::vector<json*> stack_;
  std::vector<std::set<std::string>> keys_;
  json* pending_{nullptr};
};

// nlohmann quotes the offending input in its messages; bytes that are not
// printable ASCII would make the error itself invalid UTF-8.
std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f)
      out += static_cast<char>(c);
    else
      out += fmt::format("\\x{:02x}", c);
  }
  return out;
}

}  // namespace

StrictJson parse_json_strict(std::string_view text, const std::string& file,
                             std::uint64_t base_offset) {
  StrictJson out;
  const char* high = text.data();
  DomBuilder sax(out, text.data(), &high);
  TrackingIter first{text.data(), &high};
  TrackingIter last{text.data() + text.size(), &high};
  bool ok = false;
  try {
    ok = json::sax_parse(first, last, &sax);
  } catch (const json::exception& e) {
    // Depth/size limits and similar surface as exceptions rather than SAX errors.
    throw_bad_input(fmt::format("invalid JSON: {}", printable(e.what())),
                    {file, "", base_offset + static_cast<std::uint64_t>(high - text.data())});
  }
  if (!ok) {
    if (sax.has_dup_)
      throw_bad_input(fmt::format("duplicate JSON key '{}'", printable(sax.dup_key_)),
                      {file, sax.dup_top_ ? sax.dup_key_ : "", base_offset + sax.dup_pos_});
    throw_bad_input(fmt::format("invalid JSON: {}", printable(sax.err_)), {file, "", base_offset + sax.err_pos_});
  }
  return out;
}

}  // namespace selq::io
