#include "io/safetensors_hash.h"

#include "core/error.h"
#include "io/safetensors.h"
#include "io/xxh3.h"

namespace selq::io {

std::uint64_t combine_content_hash(std::span<const std::uint8_t> head,
                                   const std::vector<std::uint64_t>& tensor_hashes_in_offset_order) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, head.data(), head.size());
  for (const std::uint64_t h : tensor_hashes_in_offset_order) {
    std::uint8_t le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<std::uint8_t>(h >> (8 * i));
    XXH3_64bits_update(st, le, sizeof le);
  }
  const std::uint64_t out = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return out;
}

std::optional<std::uint64_t> file_content_hash(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f;
  try {
    f = SafetensorsFile::open(path);
  } catch (const Error&) {
    return std::nullopt;
  }
  // entries() is in data-offset order (the reader sorts and validates it).
  std::vector<std::uint64_t> hashes;
  hashes.reserve(f->entries().size());
  for (const auto& e : f->entries()) {
    const TensorView v = f->view(e.info.name);
    populate_pages(v.bytes);
    hashes.push_back(XXH3_64bits(v.bytes.data(), v.bytes.size()));
  }
  return combine_content_hash(f->head_bytes(), hashes);
}

}  // namespace selq::io
