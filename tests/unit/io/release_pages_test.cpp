// io::release_file_pages: a consumed source tensor's pages leave the resident
// set, and nothing about the mapped bytes changes (the pipeline calls it as
// soon as a tensor is used; a neighbour sharing a page must stay readable).
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

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

// A file holding tensors `a` then `b` (U8, the given sizes, random bytes).
struct TwoTensorFile {
  TwoTensorFile(std::size_t a_size, std::size_t b_size)
      : a{"a", DType::U8, {static_cast<std::int64_t>(a_size)}},
        b{"b", DType::U8, {static_cast<std::int64_t>(b_size)}},
        a_bytes(testing::random_bytes(a_size, 7)),
        b_bytes(testing::random_bytes(b_size, 8)),
        path(dir.file("x.safetensors")) {
    testing::write_bytes(path, serialize_safetensors({{a, a_bytes}, {b, b_bytes}}, {}));
    file = SafetensorsFile::open(path);
  }
  TempDir dir;
  TensorInfo a, b;
  std::vector<std::uint8_t> a_bytes, b_bytes;
  std::string path;
  std::unique_ptr<SafetensorsFile> file;
};

TEST(ReleaseFilePages, DropsTheWholePagesOfATensorAndKeepsEveryByte) {
  // An 8 MiB tensor and an odd-sized neighbour that shares its last page.
  TwoTensorFile t(8 << 20, 1001);
  const TensorView vb = t.file->view("a");
  const TensorView vs = t.file->view("b");

  populate_pages(vb.bytes);
  populate_pages(vs.bytes);
  const long before = resident_kb_of(t.path);
  ASSERT_GE(before, 8 * 1024) << "populate did not map the tensor";

  release_file_pages(vb.bytes);
  const long after = resident_kb_of(t.path);
  // All but the partial pages at either end are gone from the resident set.
  EXPECT_LE(after, before - 8 * 1024 + 8) << "before " << before << " kB, after " << after << " kB";

  // The data is the file's, read again from the page cache; the neighbour too.
  EXPECT_EQ(0, std::memcmp(vb.bytes.data(), t.a_bytes.data(), t.a_bytes.size()));
  EXPECT_EQ(0, std::memcmp(vs.bytes.data(), t.b_bytes.data(), t.b_bytes.size()));
}

TEST(ReleaseFilePages, ATensorWithinOnePageReleasesNothing) {
  TwoTensorFile t(100, 100);
  populate_pages(t.file->view("a").bytes);
  const long before = resident_kb_of(t.path);
  release_file_pages(t.file->view("a").bytes);
  EXPECT_EQ(resident_kb_of(t.path), before);
  EXPECT_EQ(0, std::memcmp(t.file->view("b").bytes.data(), t.b_bytes.data(), t.b_bytes.size()));
}

}  // namespace
}  // namespace selq::io
