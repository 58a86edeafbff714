// io::release_file_pages: a consumed source tensor's pages leave the resident
// set, and nothing about the mapped bytes changes (the pipeline calls it as
// soon as a tensor is used; a neighbour sharing a page must stay readable).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>

#include "io/safetensors.h"
#include "io_test_util.h"

namespace selq::io {
namespace {

using testing::TempDir;

// Resident kB of this process's mappings of `path` (from /proc/self/smaps).
long resident_kb_of(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in = false;
  long kb = 0;
  while (std::getline(smaps, line)) {
    const bool header = !line.empty() && line.find(':') > line.find(' ');  // "addr-addr perms ..."
    if (header) {
      in = line.size() >= path.size() && line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in && line.rfind("Rss:", 0) == 0) {
      kb += std::stol(line.substr(4));
    }
  }
  return kb;
}

TEST(ReleaseFilePages, DropsTheWholePagesOfATensorAndKeepsEveryByte) {
  // Two tensors: an 8 MiB one and an odd-sized neighbour that shares its last page.
  TensorInfo big{"big", DType::U8, {8 << 20}};
  TensorInfo small{"small", DType::U8, {1001}};
  const auto big_bytes = testing::random_bytes(big.nbytes(), 7);
  const auto small_bytes = testing::random_bytes(small.nbytes(), 8);
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  testing::write_bytes(path, serialize_safetensors({{big, big_bytes}, {small, small_bytes}}, {}));
  const auto f = SafetensorsFile::open(path);
  const TensorView vb = f->view("big");
  const TensorView vs = f->view("small");

  populate_pages(vb.bytes);
  populate_pages(vs.bytes);
  const long before = resident_kb_of(path);
  ASSERT_GE(before, 8 * 1024) << "populate did not map the tensor";

  release_file_pages(vb.bytes);
  const long after = resident_kb_of(path);
  // All but the partial pages at either end are gone from the resident set.
  EXPECT_LE(after, before - 8 * 1024 + 8) << "before " << before << " kB, after " << after << " kB";

  // The data is the file's, read again from the page cache; the neighbour too.
  EXPECT_EQ(0, std::memcmp(vb.bytes.data(), big_bytes.data(), big_bytes.size()));
  EXPECT_EQ(0, std::memcmp(vs.bytes.data(), small_bytes.data(), small_bytes.size()));
}

TEST(ReleaseFilePages, ATensorWithinOnePageReleasesNothing) {
  TensorInfo a{"a", DType::U8, {100}};
  TensorInfo b{"b", DType::U8, {100}};
  const auto ab = testing::random_bytes(a.nbytes(), 1);
  const auto bb = testing::random_bytes(b.nbytes(), 2);
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  testing::write_bytes(path, serialize_safetensors({{a, ab}, {b, bb}}, {}));
  const auto f = SafetensorsFile::open(path);
  populate_pages(f->view("a").bytes);
  const long before = resident_kb_of(path);
  release_file_pages(f->view("a").bytes);
  EXPECT_EQ(resident_kb_of(path), before);
  EXPECT_EQ(0, std::memcmp(f->view("b").bytes.data(), bb.data(), bb.size()));
}

}  // namespace
}  // namespace selq::io
