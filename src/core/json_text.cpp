#include "core/json_text.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace selq {

void append_json_string(std::string& out, std::string_view s) {
  const bool plain = std::none_of(s.begin(), s.end(), [](char c) {
    return c == '"' || c == '\\' || static_cast<unsigned char>(c) < 0x20;
  });
  if (!plain) {
    out += nlohmann::json(s).dump();
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

}  // namespace selq
