// Writes seed corpora for the fuzzers: valid files of every dtype and shape
// kind, and one broken variant per validation rule. Generated at fuzz time so
// nothing binary is committed.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void put(const fs::path& dir, const std::string& name, const Bytes& b) {
  std::ofstream f(dir / name, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}
void put(const fs::path& dir, const std::string& name, const std::string& s) { put(dir, name, Bytes(s.begin(), s.end())); }

Bytes raw(const std::string& header, std::size_t data) {
  Bytes out(8 + header.size() + data, 0);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), out.begin() + 8);
  return out;
}

void safetensors_seeds(const fs::path& dir) {
  using namespace selq;
  int k = 0;
  for (int d = 0; d <= static_cast<int>(DType::U64); ++d) {
    const auto dt = static_cast<DType>(d);
    const TensorInfo a{"w", dt, {2, 4}}, b{"s", dt, dtype_bits(dt) < 8 ? Shape{4} : Shape{}}, z{"z", dt, {0, 3}};
    std::vector<io::TensorBytes> ts{{a, Bytes(a.nbytes(), 0x3c)}, {b, Bytes(b.nbytes(), 0x11)}, {z, {}}};
    put(dir, "valid_" + std::to_string(k++), io::serialize_safetensors(ts, {{"format", "pt"}}));
  }
  put(dir, "empty", raw("{}", 0));
  put(dir, "ws", raw("  {\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}  ", 1));
  const std::vector<std::pair<std::string, std::size_t>> bad{
      {R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4},
      {R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", 4},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4},
      {R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", 2},
      {R"({"a":{"dtype":"F6_E3M2","shape":[2],"data_offsets":[0,2]}})", 2},
      {R"({"a":{"dtype":"U8","shape":[4611686018427387904,8],"data_offsets":[0,0]}})", 0},
      {R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1},
      {R"({"__metadata__":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1},
      {R"({"__metadata__":{"a":1}})", 0},
      {R"({"a":{"dtype":"X9","shape":[-1,1.5],"data_offsets":[0,18446744073709551616]}})", 0},
      {R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 5},
      {"{\"a\xff\":1}", 0},
      {R"({"a":)", 0},
  };
  for (std::size_t i = 0; i < bad.size(); ++i) put(dir, "bad_" + std::to_string(i), raw(bad[i].first, bad[i].second));
  Bytes past = raw("{}", 0);
  past[0] = 200;
  put(dir, "past_eof", past);
  put(dir, "tiny", Bytes{1, 2, 3});
}

void index_seeds(const fs::path& dir) {
  put(dir, "valid", std::string(R"({"metadata":{"total_size":123},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"sub/m.safetensors"}})"));
  put(dir, "no_metadata", std::string(R"({"weight_map":{}})"));
  put(dir, "dotdot", std::string(R"({"weight_map":{"a":"../x.safetensors"}})"));
  put(dir, "abs", std::string(R"({"weight_map":{"a":"/etc/passwd"}})"));
  put(dir, "dup", std::string(R"({"weight_map":{"a":"x","a":"y"}})"));
  put(dir, "nul", std::string(R"({"weight_map":{"a":"x\u0000y"}})"));
  put(dir, "types", std::string(R"({"metadata":{"total_size":"big"},"weight_map":{"a":3}})"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fuzz_corpus_gen <safetensors seed dir> <index seed dir>\n");
    return 64;
  }
  fs::create_directories(argv[1]);
  fs::create_directories(argv[2]);
  safetensors_seeds(argv[1]);
  index_seeds(argv[2]);
  return 0;
}
