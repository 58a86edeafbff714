#pragma once
// The content hash of a safetensors file, computed without reading the file
// back: XXH3-64 over the file's first bytes (8-byte length + header JSON)
// followed by each tensor's own XXH3-64 (little-endian u64) in data-offset
// order. Because a valid file's tensors tile its data section (the reader
// rejects gaps, overlaps and trailing bytes), this covers every byte. A writer
// that already hashes each tensor for the manifest gets the file hash for free;
// hashing the whole file again after writing it was a full extra read pass.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace selq::io {

std::uint64_t combine_content_hash(std::span<const std::uint8_t> head,
                                   const std::vector<std::uint64_t>& tensor_hashes_in_offset_order);

// The content hash of the file at `path`, or nullopt if it is not a valid
// safetensors file (missing, truncated, malformed).
std::optional<std::uint64_t> file_content_hash(const std::string& path);

}  // namespace selq::io
