// Cross-check driver: dequantizes every tensor of a GGUF file (or only the
// NAMEs given) with selq and writes the F32 values, concatenated in
// tensor-info order, to OUT, so that gguf_crosscheck.py can compare them bit
// for bit with gguf-py.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "runtime/gguf/gguf.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s FILE.gguf OUT.f32 [NAME...]\n", argv[0]);
    return 2;
  }
  try {
    const std::vector<std::string> names(argv + 3, argv + argc);
    auto f = selq::runtime::GgufFile::open(argv[1]);
    for (const auto& n : names)
      if (!f->find_tensor(n)) {
        std::fprintf(stderr, "%s: no tensor %s\n", argv[1], n.c_str());
        return 2;
      }
    std::FILE* out = std::fopen(argv[2], "wb");
    if (!out) return 2;
    for (const auto& t : f->tensors()) {
      if (!names.empty() && std::find(names.begin(), names.end(), t.name) == names.end()) continue;
      const auto v = f->dequantize(t);
      if (std::fwrite(v.data(), sizeof(float), v.size(), out) != v.size()) return 2;
    }
    return std::fclose(out) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
