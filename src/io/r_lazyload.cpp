// R's lazy-load database: a concatenation of chunks, each a 4-byte big-endian
// uncompressed length followed by one zlib stream holding a serialized R
// object ("X\n", version 2 or 3 header, then the object in XDR: big-endian
// 32-bit flags and lengths). The .rdx index only names the chunks; reading
// them in order needs none of it.
#include "io/r_lazyload.h"

#include <zlib.h>

#include <cstdint>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace selq::io {
namespace {

constexpr int kCharSxp = 9;
constexpr int kStrSxp = 16;
constexpr std::uint32_t kLatin1Level = 1u << 2;

std::uint32_t be32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// Latin-1 code points map one to one onto U+0000..U+00FF.
std::string latin1_to_utf8(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

class XdrReader {
 public:
  XdrReader(const std::string& data, const std::string& file, std::uint64_t chunk_offset)
      : d_(data), file_(file), chunk_(chunk_offset) {}

  std::uint32_t u32() {
    need(4);
    std::uint32_t v = be32(reinterpret_cast<const unsigned char*>(d_.data() + pos_));
    pos_ += 4;
    return v;
  }
  std::string_view bytes(std::size_t n) {
    need(n);
    std::string_view v(d_.data() + pos_, n);
    pos_ += n;
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw_bad_input(fmt::format("R serialized object: {} (at byte {} of the chunk's {} uncompressed bytes)", what,
                                pos_, d_.size()),
                    {file_, {}, chunk_});
  }

 private:
  void need(std::size_t n) const {
    if (d_.size() - pos_ < n) fail("truncated");
  }
  const std::string& d_;
  const std::string& file_;
  std::uint64_t chunk_;
  std::size_t pos_{0};
};

// The object in one decompressed chunk, if it is a character vector.
bool parse_character_vector(XdrReader& r, std::vector<std::string>& out) {
  if (r.bytes(2) != "X\n") r.fail("not in XDR format (selq reads only R's default 'X' serialization)");
  const std::uint32_t version = r.u32();
  if (version != 2 && version != 3) r.fail(fmt::format("serialization version {} (2 or 3 expected)", version));
  r.u32();  // R version that wrote it
  r.u32();  // oldest R version that reads it
  if (version == 3) r.bytes(r.u32());  // the writer's native encoding name
  const std::uint32_t flags = r.u32();
  if ((flags & 0xFF) != kStrSxp) return false;
  std::uint64_t length = r.u32();
  if (length == 0xFFFFFFFFu) length = (std::uint64_t{r.u32()} << 32) | r.u32();  // long vector
  out.reserve(length);
  for (std::uint64_t i = 0; i < length; ++i) {
    const std::uint32_t cflags = r.u32();
    if ((cflags & 0xFF) != kCharSxp) r.fail(fmt::format("element {} is not a string (type {})", i, cflags & 0xFF));
    const std::uint32_t n = r.u32();
    if (n == 0xFFFFFFFFu) {  // NA_character_
      out.emplace_back();
      continue;
    }
    const std::string_view s = r.bytes(n);
    const std::uint32_t levels = cflags >> 12;
    out.push_back((levels & kLatin1Level) ? latin1_to_utf8(s) : std::string(s));
  }
  return true;
}

}  // namespace

std::vector<std::vector<std::string>> read_r_character_vectors(const std::string& rdb_path) {
  const std::string file = read_file(rdb_path);
  std::vector<std::vector<std::string>> vectors;
  std::size_t off = 0;
  while (off < file.size()) {
    if (file.size() - off < 6)
      throw_bad_input("R lazy-load database: truncated chunk header", {rdb_path, {}, off});
    const std::uint32_t size = be32(reinterpret_cast<const unsigned char*>(file.data() + off));
    std::string data(size, '\0');
    z_stream z{};
    if (inflateInit(&z) != Z_OK) throw_bad_input("zlib: cannot start inflating", {rdb_path, {}, off});
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(file.data() + off + 4));
    z.avail_in = static_cast<uInt>(file.size() - off - 4);
    z.next_out = reinterpret_cast<Bytef*>(data.data());
    z.avail_out = size;
    const int rc = inflate(&z, Z_FINISH);
    const std::size_t consumed = z.total_in;
    const std::size_t produced = z.total_out;
    inflateEnd(&z);
    if (rc != Z_STREAM_END || produced != size)
      throw_bad_input(fmt::format("R lazy-load database: chunk is not a zlib stream of {} bytes (zlib status {}, "
                                  "{} bytes out)",
                                  size, rc, produced),
                      {rdb_path, {}, off});
    XdrReader reader(data, rdb_path, off);
    std::vector<std::string> strings;
    if (parse_character_vector(reader, strings)) vectors.push_back(std::move(strings));
    off += 4 + consumed;
  }
  return vectors;
}

}  // namespace selq::io
