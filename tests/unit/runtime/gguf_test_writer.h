#pragma once
// Writes GGUF images field by field so each test controls every byte
// (test_gguf.cpp, test_import_gguf.cpp).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace selq::runtime::testutil {

struct Gguf {
  std::vector<std::uint8_t> b;
  template <class T>
  Gguf& put(T v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(T));
    return *this;
  }
  Gguf& str(const std::string& s) {
    put<std::uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Gguf& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    return put<std::uint32_t>(0x46554747).put(version).put(n_tensors).put(n_kv);
  }
  Gguf& kv_u32(const std::string& k, std::uint32_t v) { return str(k).put<std::uint32_t>(4).put(v); }
  Gguf& kv_f32(const std::string& k, float v) { return str(k).put<std::uint32_t>(6).put(v); }
  Gguf& kv_str(const std::string& k, const std::string& v) { return str(k).put<std::uint32_t>(8).str(v); }
  Gguf& tensor(const std::string& name, std::vector<std::uint64_t> ne, std::uint32_t type, std::uint64_t off) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
    for (auto n : ne) put(n);
    return put(type).put(off);
  }
  Gguf& pad(std::size_t a = 32) {
    while (b.size() % a) b.push_back(0);
    return *this;
  }
  Gguf& bytes(const std::vector<std::uint8_t>& d) {
    b.insert(b.end(), d.begin(), d.end());
    return *this;
  }
};

inline std::string write_tmp(const std::vector<std::uint8_t>& bytes, const std::string& name) {
  // The pid keeps parallel ctest processes (one per test case) apart.
  const auto path = std::filesystem::temp_directory_path() /
                    ("selq_test_" + name + "_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                              static_cast<std::streamsize>(bytes.size()));
  return path.string();
}


}  // namespace selq::runtime::testutil
