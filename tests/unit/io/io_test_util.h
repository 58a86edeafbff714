#pragma once
// Helpers for the io tests: scratch directories and hand-crafted files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

// A test that cannot run here (no root to mount a tmpfs, a filesystem that keeps its pages):
// skipped on a developer's machine, failed under CI=true, where setup makes it runnable.
#define SELQ_SKIP_OR_FAIL_IN_CI(why)                                                   \
  do {                                                                                 \
    const char* ci_ = std::getenv("CI");                                               \
    if (ci_ != nullptr && std::string(ci_) == "true") FAIL() << "cannot run under CI: " << why; \
    GTEST_SKIP() << why;                                                               \
  } while (0)

namespace selq::io::testing {

namespace fs = std::filesystem;

// A fresh directory removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "selq-io-XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::vector<std::uint8_t> le64(std::uint64_t v) {
  std::vector<std::uint8_t> out(8);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(v >> (8 * i));
  return out;
}

// A file image whose length prefix matches `header` exactly.
inline std::vector<std::uint8_t> raw_file(const std::string& header, std::size_t data_bytes = 0) {
  std::vector<std::uint8_t> out(8 + header.size() + data_bytes);
  const auto len = le64(header.size());
  std::copy(len.begin(), len.end(), out.begin());
  std::copy(header.begin(), header.end(), out.begin() + 8);
  for (std::size_t i = 0; i < data_bytes; ++i)
    out[8 + header.size() + i] = static_cast<std::uint8_t>(i * 7 + 1);
  return out;
}

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(rng());
  return out;
}

// Runs `f`, which must throw selq::Error; returns it (or fails the test).
inline Error catch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-selq exception: " << e.what();
    return Error(ErrorKind::Internal, "wrong exception");
  }
  ADD_FAILURE() << "expected a selq::Error, nothing was thrown";
  return Error(ErrorKind::Internal, "no exception");
}

}  // namespace selq::io::testing
