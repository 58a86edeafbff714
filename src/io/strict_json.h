#pragma once
// JSON parsing that rejects duplicate object keys. nlohmann keeps the last of
// two equal keys silently; for a safetensors header that would hide a tensor,
// and for an index it would hide a shard assignment.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace selq::io {

struct StrictJson {
  nlohmann::json value;
  // Offset (relative to the text) where each top-level key starts.
  std::map<std::string, std::uint64_t> top_key_pos;
};

// Throws BadInput naming `file` and the absolute byte (`base_offset` + position).
StrictJson parse_json_strict(std::string_view text, const std::string& file,
                             std::uint64_t base_offset = 0);

}  // namespace selq::io
