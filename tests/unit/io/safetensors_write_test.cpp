#include <fmt/format.h>
#include <gtest/gtest.h>
#include <xxhash.h>
#include <sys/mount.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace selq::io {
namespace {

using testing::catch_error;
using testing::TempDir;
namespace fs = std::filesystem;

std::vector<TensorBytes> sample_tensors(int n, std::uint32_t seed) {
  std::vector<TensorBytes> out;
  for (int i = 0; i < n; ++i) {
    const auto dt = static_cast<DType>(i % (static_cast<int>(DType::U64) + 1));
    TensorInfo info{"layer." + std::to_string(i) + ".weight", dt, {3, 8 * (i % 5)}};
    if (i % 7 == 3) info.shape = {};  // rank 0
    if (dtype_bits(dt) < 8 && info.shape.empty()) info.shape = {4};
    out.push_back({info, testing::random_bytes(info.nbytes(), seed + static_cast<std::uint32_t>(i))});
  }
  return out;
}

TEST(SafetensorsWrite, RoundTripKeepsOrderMetadataAndBytes) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  auto tensors = sample_tensors(30, 7);
  std::reverse(tensors.begin(), tensors.end());  // declared order is not name order
  const std::map<std::string, std::string> md{{"format", "pt"}, {"quote\"d", "ü"}};
  save_safetensors(path, tensors, md);
  EXPECT_FALSE(fs::exists(path + ".selq-tmp"));

  const auto bytes = testing::read_bytes(path);
  EXPECT_EQ(bytes, serialize_safetensors(tensors, md));
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  EXPECT_EQ(n % 8, 0u);
  const std::string header(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(n));
  EXPECT_EQ(header.rfind("{\"__metadata__\":", 0), 0u) << header;
  // Tensors appear in the header, and in the data, in declared order.
  std::size_t last = 0;
  for (const auto& t : tensors) {
    const auto pos = header.find("\"" + t.info.name + "\"");
    ASSERT_NE(pos, std::string::npos);
    EXPECT_GT(pos, last);
    last = pos;
  }

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata(), md);
  EXPECT_EQ(f->data_start(), 8 + n);
  for (const auto& t : tensors) {
    const TensorView v = f->view(t.info.name);
    EXPECT_EQ(v.info->dtype, t.info.dtype);
    EXPECT_EQ(v.info->shape, t.info.shape);
    ASSERT_EQ(v.bytes.size(), t.bytes.size());
    EXPECT_TRUE(std::equal(v.bytes.begin(), v.bytes.end(), t.bytes.begin()));
  }
}

TEST(SafetensorsWrite, NamesThatNeedEscapingRoundTrip) {
  // The header is written as text; names with quotes, backslashes or control
  // characters must still come back as they were.
  TempDir dir;
  const std::string path = dir.file("odd.safetensors");
  auto tensors = sample_tensors(3, 5);
  tensors[0].info.name = "a \"quoted\" name";
  tensors[1].info.name = "back\\slash\ttab\nnewline";
  tensors[2].info.name = "model.layers.0.plain.weight";
  save_safetensors(path, tensors, {});
  const auto f = SafetensorsFile::open(path);
  for (const auto& t : tensors) {
    const TensorView v = f->view(t.info.name);
    EXPECT_EQ(v.info->shape, t.info.shape) << t.info.name;
    EXPECT_TRUE(std::equal(v.bytes.begin(), v.bytes.end(), t.bytes.begin())) << t.info.name;
  }
}

TEST(SafetensorsWrite, UncommittedWriterLeavesNoFile) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const auto tensors = sample_tensors(4, 1);
  {
    std::vector<TensorInfo> infos;
    for (const auto& t : tensors) infos.push_back(t.info);
    SafetensorsWriter w(path, infos);
    EXPECT_TRUE(fs::exists(w.temp_path()));
    w.write(tensors[0].info.name, tensors[0].bytes);
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".selq-tmp"));
}

TEST(SafetensorsWrite, CommitRefusesMissingTensorsAndBadWrites) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  const auto tensors = sample_tensors(3, 2);
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  {
    SafetensorsWriter w(path, infos);
    w.write(tensors[0].info.name, tensors[0].bytes);
    Error e = catch_error([&] { w.write("nope", tensors[0].bytes); });
    EXPECT_EQ(e.where().tensor, "nope");
    e = catch_error([&] { w.write(tensors[1].info.name, tensors[0].bytes); });
    EXPECT_EQ(e.where().tensor, tensors[1].info.name);
    e = catch_error([&] { w.commit(); });
    EXPECT_EQ(e.where().file, path);
    EXPECT_FALSE(e.where().tensor.empty());
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".selq-tmp"));
}

TEST(SafetensorsWrite, RejectsReservedDuplicateAndMisalignedDeclarations) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  EXPECT_EQ(catch_error([&] { SafetensorsWriter w(path, {{"__metadata__", DType::U8, {1}}}); }).where().tensor,
            "__metadata__");
  EXPECT_EQ(catch_error([&] {
              SafetensorsWriter w(path, {{"a", DType::U8, {1}}, {"a", DType::U8, {1}}});
            }).where().tensor,
            "a");
  EXPECT_EQ(catch_error([&] { SafetensorsWriter w(path, {{"f4", DType::F4, {3}}}); }).where().tensor, "f4");
  EXPECT_FALSE(fs::exists(path + ".selq-tmp"));
}

TEST(SafetensorsWrite, ParallelOutOfOrderWritesGiveIdenticalBytes) {
  TempDir dir;
  const auto tensors = sample_tensors(64, 3);
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  const std::string path = dir.file("par.safetensors");
  {
    SafetensorsWriter w(path, infos);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k)
      threads.emplace_back([&, k] {
        // Each thread takes every 4th tensor, last to first.
        for (int i = static_cast<int>(tensors.size()) - 1 - k; i >= 0; i -= 4)
          w.write(tensors[static_cast<std::size_t>(i)].info.name, tensors[static_cast<std::size_t>(i)].bytes);
      });
    for (auto& t : threads) t.join();
    w.commit();
  }
  EXPECT_EQ(testing::read_bytes(path), serialize_safetensors(tensors));
}

// A 64 KiB tmpfs: the only portable way to get a real ENOSPC. Needs root.
// (size=0 mounts a tmpfs without a limit.)
class TinyFs {
 public:
  explicit TinyFs(const TempDir& dir, const char* options = "size=64k") : path_(dir.file("tiny")) {
    fs::create_directory(path_);
    mounted_ = ::mount("tmpfs", path_.c_str(), "tmpfs", 0, options) == 0;
  }
  ~TinyFs() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
  bool mounted_{false};
};

TEST(SafetensorsWrite, DiskFullIsAnIoErrorAndLeavesNothing) {
  TempDir dir;
  TinyFs tiny(dir);
  if (!tiny.mounted()) SELQ_SKIP_OR_FAIL_IN_CI("cannot mount a tmpfs (not root)");
  const std::string path = tiny.file("big.safetensors");
  const TensorInfo big{"big", DType::F32, {1024, 64}};  // 256 KiB
  const Error e = catch_error([&] {
    SafetensorsWriter w(path, {big});
    const std::vector<std::uint8_t> bytes(big.nbytes(), 1);
    w.write("big", bytes);
    w.commit();
  });
  EXPECT_EQ(e.kind(), ErrorKind::Io) << e.what();
  EXPECT_EQ(e.where().file, path);
  EXPECT_TRUE(e.where().offset.has_value());
  EXPECT_NE(std::string(e.what()).find("No space left"), std::string::npos) << e.what();
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".selq-tmp"));

  // Whole-file writes fail in pwrite rather than at reservation.
  const std::string small = tiny.file("config.json");
  write_file_atomic(small, "{\"old\":true}");
  const std::string huge(200 * 1024, 'x');
  const Error e2 = catch_error([&] { write_file_atomic(small, huge); });
  EXPECT_EQ(e2.kind(), ErrorKind::Io);
  EXPECT_EQ(e2.where().file, small);
  EXPECT_TRUE(e2.where().offset.has_value());
  EXPECT_EQ(read_file(small), "{\"old\":true}");  // old content intact
  EXPECT_FALSE(fs::exists(small + ".selq-tmp"));
  const std::string fresh = tiny.file("fresh.json");
  EXPECT_EQ(catch_error([&] { write_file_atomic(fresh, huge); }).kind(), ErrorKind::Io);
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_FALSE(fs::exists(fresh + ".selq-tmp"));
}

// On tmpfs the writer checks free space instead of fallocate (which would
// zero every page up front); a tmpfs without a size limit reports no blocks
// at all and must not look full.
TEST(SafetensorsWrite, TmpfsWithoutASizeLimitIsNotFull) {
  TempDir dir;
  TinyFs unlimited(dir, "size=0");
  if (!unlimited.mounted()) SELQ_SKIP_OR_FAIL_IN_CI("cannot mount a tmpfs (not root)");
  const std::string path = unlimited.file("t.safetensors");
  const auto tensors = sample_tensors(5, 11);
  save_safetensors(path, tensors);
  EXPECT_EQ(testing::read_bytes(path), serialize_safetensors(tensors));
}

// A shard split over ranks (pipeline/shared_shard.h): writers opened Shared
// on one file, each writing some tensors, then a committer that finishes
// them all with their hashes: the file is a single writer's, byte for byte,
// and nothing a Shared writer does removes or truncates the file.
TEST(SafetensorsWriter, SharedWritersMakeTheOneWritersFile) {
  testing::TempDir dir;
  std::vector<TensorBytes> tensors;
  for (int i = 0; i < 7; ++i) {
    TensorInfo info{fmt::format("w.{}", i), DType::BF16, {5, 3 + 2 * i}};
    tensors.push_back({info, testing::random_bytes(info.nbytes(), static_cast<std::uint32_t>(7 + i))});
  }
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  const std::string one = dir.file("one.safetensors"), shared = dir.file("shared.safetensors");
  save_safetensors(one, tensors, {{"format", "pt"}});
  using W = SafetensorsWriter;
  {
    // Stale bytes from a killed run's temporary file are all overwritten.
    testing::write_bytes(W::temp_path_for(shared), std::vector<std::uint8_t>(64, 0xAB));
    W part_a(shared, infos, {{"format", "pt"}}, W::Open::Shared);
    W part_b(shared, infos, {{"format", "pt"}}, W::Open::Shared);
    for (std::size_t i = 0; i < tensors.size(); ++i) (i % 2 ? part_a : part_b).write(tensors[i].info.name, tensors[i].bytes);
    part_a.flush();
  }  // part_b is destroyed unflushed: the file stays
  ASSERT_TRUE(std::filesystem::exists(W::temp_path_for(shared)));
  W committer(shared, infos, {{"format", "pt"}}, W::Open::Shared);
  EXPECT_THROW(committer.commit(), Error);  // no tensor finished yet
  for (const auto& t : tensors) committer.finish(t.info.name, XXH3_64bits(t.bytes.data(), t.bytes.size()));
  committer.commit();
  EXPECT_FALSE(std::filesystem::exists(W::temp_path_for(shared)));
  EXPECT_EQ(testing::read_bytes(shared), testing::read_bytes(one));
}

}  // namespace
}  // namespace selq::io
