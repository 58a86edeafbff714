// Driver for the Python safetensors cross-check (safetensors_crosscheck.py).
//   safetensors_tool dump <file>             -> JSON: metadata + tensors with hex bytes
//   safetensors_tool write <spec.json> <out> -> writes tensors given as hex, in spec order
//   safetensors_tool rewrite <in> <out>      -> reads <in>, writes it again in offset order
// Errors print the selq message and exit 2, so the script can test rejections.
#include <cstdio>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace {

using nlohmann::json;
using namespace selq;

std::string to_hex(std::span<const std::uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  s.reserve(b.size() * 2);
  for (auto x : b) {
    s += d[x >> 4];
    s += d[x & 15];
  }
  return s;
}

std::vector<std::uint8_t> from_hex(const std::string& s) {
  std::vector<std::uint8_t> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = static_cast<std::uint8_t>(std::stoi(s.substr(2 * i, 2), nullptr, 16));
  return out;
}

int dump(const std::string& path) {
  const auto f = io::SafetensorsFile::open(path);
  json out;
  out["metadata"] = f->metadata();
  out["tensors"] = json::array();
  for (const auto& e : f->entries()) {
    const auto v = f->view(e.info.name);
    out["tensors"].push_back({{"name", e.info.name},
                              {"dtype", std::string(dtype_name(e.info.dtype))},
                              {"shape", e.info.shape},
                              {"data_offsets", {e.begin, e.end}},
                              {"hex", to_hex(v.bytes)}});
  }
  std::cout << out.dump() << "\n";
  return 0;
}

int write(const std::string& spec_path, const std::string& out_path) {
  const json spec = json::parse(io::read_file(spec_path));
  std::vector<io::TensorBytes> tensors;
  for (const auto& t : spec.at("tensors")) {
    const auto dt = dtype_from_name(t.at("dtype").get<std::string>());
    if (!dt) throw_bad_input("unknown dtype in spec");
    tensors.push_back({{t.at("name"), *dt, t.at("shape").get<Shape>()}, from_hex(t.at("hex"))});
  }
  io::save_safetensors(out_path, tensors, spec.value("metadata", std::map<std::string, std::string>{}));
  return 0;
}

int rewrite(const std::string& in, const std::string& out) {
  const auto f = io::SafetensorsFile::open(in);
  std::vector<TensorInfo> infos;
  for (const auto& e : f->entries()) infos.push_back(e.info);
  io::SafetensorsWriter w(out, infos, f->metadata());
  // Reverse order on purpose: offsets are fixed up front, so order must not matter.
  for (auto it = f->entries().rbegin(); it != f->entries().rend(); ++it)
    w.write(it->info.name, f->view(it->info.name).bytes);
  w.commit();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "dump" && argc == 3) return dump(argv[2]);
    if (cmd == "write" && argc == 4) return write(argv[2], argv[3]);
    if (cmd == "rewrite" && argc == 4) return rewrite(argv[2], argv[3]);
    std::fprintf(stderr, "usage: safetensors_tool dump <file> | write <spec.json> <out> | rewrite <in> <out>\n");
    return 64;
  } catch (const selq::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal: %s\n", e.what());
    return 1;
  }
}
