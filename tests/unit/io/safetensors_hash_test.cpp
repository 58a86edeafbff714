// The shard content hash the quantize journal records: the writer's value,
// computed from tensor hashes without reading the file back, must equal the
// value computed from the file, and must change with any byte of the file.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <random>

#include "io/safetensors.h"
#include "io/safetensors_hash.h"
#include "io_test_util.h"

namespace selq::io {
namespace {

using testing::TempDir;

std::vector<TensorBytes> tensors_with_empty_ones() {
  std::vector<TensorBytes> out;
  for (int i = 0; i < 12; ++i) {
    // Every third tensor is empty: several tensors then share one offset and
    // the order among them is by name.
    TensorInfo info{"t." + std::to_string((i * 5) % 12), DType::BF16, {3, i % 3 == 0 ? 0 : 4 + i}};
    out.push_back({info, testing::random_bytes(info.nbytes(), static_cast<std::uint32_t>(100 + i))});
  }
  return out;
}

// An independent reading of the definition (safetensors_hash.h), straight
// from the file's bytes: the header length and JSON, then each tensor's
// XXH3-64 in data-offset order (ties by end, then name).
std::uint64_t reference_content_hash(const std::vector<std::uint8_t>& file) {
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(file[static_cast<std::size_t>(i)]) << (8 * i);
  const auto header = nlohmann::json::parse(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  struct Range {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Range> ranges;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") ranges.push_back({v["data_offsets"][0], v["data_offsets"][1], name});
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::vector<std::uint8_t> stream(file.begin(), file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  for (const auto& r : ranges) {
    const std::uint64_t h = XXH3_64bits(file.data() + 8 + n + r.begin, r.end - r.begin);
    const auto le = testing::le64(h);
    stream.insert(stream.end(), le.begin(), le.end());
  }
  return XXH3_64bits(stream.data(), stream.size());
}

TEST(SafetensorsContentHash, WriterValueEqualsTheFileValueAndTheDefinition) {
  TempDir dir;
  const std::string path = dir.file("shard.safetensors");
  auto tensors = tensors_with_empty_ones();
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  SafetensorsWriter w(path, infos, {{"format", "pt"}});
  // Written in an order unrelated to the layout.
  std::shuffle(tensors.begin(), tensors.end(), std::mt19937(3));
  for (const auto& t : tensors) w.write(t.info.name, t.bytes);
  const std::uint64_t from_writer = w.content_hash();
  w.commit();

  const auto file = testing::read_bytes(path);
  EXPECT_EQ(from_writer, reference_content_hash(file));
  EXPECT_EQ(file_content_hash(path), std::optional<std::uint64_t>(from_writer));
}

TEST(SafetensorsContentHash, CallerSuppliedHashesGiveTheSameValue) {
  TempDir dir;
  const auto tensors = tensors_with_empty_ones();
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  SafetensorsWriter a(dir.file("a.safetensors"), infos), b(dir.file("b.safetensors"), infos);
  for (const auto& t : tensors) {
    a.write(t.info.name, t.bytes);
    b.write(t.info.name, t.bytes, XXH3_64bits(t.bytes.data(), t.bytes.size()));
  }
  EXPECT_EQ(a.content_hash(), b.content_hash());
}

TEST(SafetensorsContentHash, EveryByteOfTheFileCounts) {
  TempDir dir;
  const std::string path = dir.file("shard.safetensors");
  save_safetensors(path, tensors_with_empty_ones(), {{"format", "pt"}});
  const auto good = testing::read_bytes(path);
  const auto base = file_content_hash(path);
  ASSERT_TRUE(base.has_value());
  // Flip bytes across the header and the data: each either changes the hash
  // or makes the file invalid (nullopt); none leaves it unchanged.
  for (std::size_t pos = 0; pos < good.size(); pos += 13) {
    auto bad = good;
    bad[pos] ^= 0x20;
    testing::write_bytes(path, bad);
    EXPECT_NE(file_content_hash(path), base) << "byte " << pos;
  }
}

TEST(SafetensorsContentHash, InvalidOrMissingFilesHaveNone) {
  TempDir dir;
  const std::string path = dir.file("shard.safetensors");
  save_safetensors(path, tensors_with_empty_ones());
  auto bytes = testing::read_bytes(path);
  bytes.pop_back();  // one byte short of the declared data
  testing::write_bytes(path, bytes);
  EXPECT_EQ(file_content_hash(path), std::nullopt);
  EXPECT_EQ(file_content_hash(dir.file("missing.safetensors")), std::nullopt);
}

TEST(SafetensorsContentHash, UnfinishedWriterRefuses) {
  TempDir dir;
  const auto tensors = tensors_with_empty_ones();
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  SafetensorsWriter w(dir.file("x.safetensors"), infos);
  w.write(tensors[1].info.name, tensors[1].bytes);
  EXPECT_THROW(w.content_hash(), Error);
}

}  // namespace
}  // namespace selq::io
