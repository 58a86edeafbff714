// io::release_file_pages: a consumed source tensor's pages leave the resident
// set, and nothing about the mapped bytes changes (the pipeline calls it as
// soon as a tensor is used; a neighbour sharing a page must stay readable).
// io::prefetch_file_pages: a tensor not in the page cache is read into it in
// the background.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>
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

// Fraction of the pages under `bytes` that are in the page cache (mincore).
double cached_fraction(std::span<const std::uint8_t> bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(bytes.data()) & ~(page - 1);
  const auto end = reinterpret_cast<std::uintptr_t>(bytes.data() + bytes.size());
  std::vector<unsigned char> in((end - begin + page - 1) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, in.data()) != 0) return -1.0;
  std::size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return static_cast<double>(n) / static_cast<double>(in.size());
}

TEST(PrefetchFilePages, ReadsAnEvictedTensorIntoThePageCache) {
  // In the working directory (the build tree, on disk): tmpfs pages cannot be
  // evicted, so there the starting state below cannot be made.
  const std::string path = (std::filesystem::current_path() / "selq-prefetch-test.safetensors").string();
  struct Remove {
    std::string p;
    ~Remove() { std::filesystem::remove(p); }
  } remove{path};
  const TensorInfo a{"a", DType::U8, {16 << 20}};
  const auto a_bytes = testing::random_bytes(16 << 20, 9);
  testing::write_bytes(path, serialize_safetensors({{a, a_bytes}}, {}));
  const auto file = SafetensorsFile::open(path);
  const TensorView v = file->view("a");

  // Evict the file's clean pages from the page cache.
  const int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::fdatasync(fd), 0);
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
  const double evicted = cached_fraction(v.bytes);
  ASSERT_GE(evicted, 0.0) << "mincore failed";
  if (evicted > 0.5) SELQ_SKIP_OR_FAIL_IN_CI("this filesystem keeps the pages cached (" << evicted << " after eviction)");

  prefetch_file_pages(v.bytes);
  double cached = 0;
  for (int i = 0; i < 1000 && (cached = cached_fraction(v.bytes)) < 1.0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(cached, 1.0) << "cached after eviction " << evicted << ", 10 s after the prefetch " << cached;
  EXPECT_EQ(0, std::memcmp(v.bytes.data(), a_bytes.data(), a_bytes.size()));
}

}  // namespace
}  // namespace selq::io
