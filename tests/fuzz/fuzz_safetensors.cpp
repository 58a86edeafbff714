// libFuzzer target: parse_safetensors_bytes must either accept a file or throw
// selq::Error; anything else (crash, UB, leak, foreign exception) is a bug.
// Accepted files must survive a write/parse round trip unchanged.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  selq::io::ParsedHeader parsed;
  try {
    parsed = selq::io::parse_safetensors_bytes(bytes, "fuzz");
  } catch (const selq::Error&) {
    return 0;
  }
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
  const std::uint64_t data_start = 8 + n;
  std::vector<selq::io::TensorBytes> tensors;
  for (const auto& e : parsed.entries) {
    if (e.end > size - data_start) std::abort();  // accepted offsets must lie inside the file
    tensors.push_back({e.info, {data + data_start + e.begin, data + data_start + e.end}});
  }
  const auto again = selq::io::serialize_safetensors(tensors, parsed.metadata);
  const auto reparsed = selq::io::parse_safetensors_bytes(again, "fuzz-roundtrip");
  if (reparsed.entries.size() != parsed.entries.size() || reparsed.metadata != parsed.metadata) std::abort();
  for (std::size_t i = 0; i < parsed.entries.size(); ++i) {
    const auto& a = parsed.entries[i];
    const auto& b = reparsed.entries[i];
    if (a.info.name != b.info.name || a.info.dtype != b.info.dtype || a.info.shape != b.info.shape ||
        a.begin != b.begin || a.end != b.end)
      std::abort();
  }
  return 0;
}
