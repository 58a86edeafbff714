#pragma once
// Writes R lazy-load databases (as R's makeLazyLoadDB does: per object a
// 4-byte big-endian length and a zlib stream of its XDR serialization), so
// tests make the files that r-cran-janeaustenr ships instead of needing it.
#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace selq::testing {

inline void put_be32(std::string& s, std::uint32_t v) {
  for (int sh = 24; sh >= 0; sh -= 8) s.push_back(static_cast<char>((v >> sh) & 0xFF));
}

// Version-3 XDR header as R 4.2 writes it.
inline std::string r_serial_header() {
  std::string s = "X\n";
  put_be32(s, 3);
  put_be32(s, 0x00040201);  // R 4.2.1
  put_be32(s, 0x00030500);
  put_be32(s, 5);
  s += "UTF-8";
  return s;
}

struct RString {
  std::optional<std::string> bytes;  // nullopt: NA
  bool latin1{false};
};

inline std::string r_character_vector(const std::vector<RString>& v) {
  std::string s = r_serial_header();
  put_be32(s, 16);  // STRSXP, no attributes
  put_be32(s, static_cast<std::uint32_t>(v.size()));
  for (const auto& e : v) {
    // CHARSXP; gp levels: 1<<2 LATIN1, 1<<3 UTF8, 1<<6 ASCII.
    put_be32(s, 9u | ((e.latin1 ? 4u : 64u) << 12));
    if (!e.bytes) {
      put_be32(s, 0xFFFFFFFFu);
      continue;
    }
    put_be32(s, static_cast<std::uint32_t>(e.bytes->size()));
    s += *e.bytes;
  }
  return s;
}

inline std::string r_integer_vector(const std::vector<std::int32_t>& v) {
  std::string s = r_serial_header();
  put_be32(s, 13);  // INTSXP
  put_be32(s, static_cast<std::uint32_t>(v.size()));
  for (auto x : v) put_be32(s, static_cast<std::uint32_t>(x));
  return s;
}

inline std::string r_lazyload_chunk(const std::string& serialized) {
  uLongf n = compressBound(serialized.size());
  std::string z(n, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &n, reinterpret_cast<const Bytef*>(serialized.data()),
                serialized.size(), 6) != Z_OK)
    throw std::runtime_error("compress2 failed");
  z.resize(n);
  std::string s;
  put_be32(s, static_cast<std::uint32_t>(serialized.size()));
  return s + z;
}

inline std::vector<RString> r_lines(const std::vector<std::string>& lines) {
  std::vector<RString> v;
  for (const auto& l : lines) v.push_back({l, false});
  return v;
}

inline void write_binary(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace selq::testing
