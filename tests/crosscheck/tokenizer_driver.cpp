// Cross-check driver for tokenizer_crosscheck.py.
//   tokenizer_driver write-json MODEL.gguf OUT.json
//       the tokenizer.json selq builds from the GGUF vocabulary and merges
//   tokenizer_driver encode (gguf|json) SOURCE TEXTS.json OUT.json
//       TEXTS.json is an array of strings; OUT.json holds, per text, selq's
//       ids and the decoding of those ids, plus the encode time.
//   tokenizer_driver default-text OUT.txt
//       selq's default evaluation text (runtime/text/default_text.h), for a machine
//       without the team's ../shared/data
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/gguf/gguf.h"
#include "runtime/gguf/gguf_tokenizer.h"
#include "runtime/text/default_text.h"
#include "runtime/text/tokenizer.h"

using selq::runtime::Tokenizer;

namespace {

Tokenizer load(const std::string& kind, const std::string& path) {
  if (kind == "gguf") return selq::runtime::tokenizer_from_gguf(*selq::runtime::GgufFile::open(path));
  return Tokenizer::from_tokenizer_json_file(path);
}

int encode(const Tokenizer& tok, const std::string& texts_path, const std::string& out_path) {
  std::ifstream in(texts_path, std::ios::binary);
  const auto texts = nlohmann::json::parse(in).get<std::vector<std::string>>();
  nlohmann::json ids = nlohmann::json::array(), decoded = nlohmann::json::array();
  double seconds = 0;
  std::size_t bytes = 0, tokens = 0;
  for (const auto& t : texts) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto v = tok.encode(t);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    bytes += t.size();
    tokens += v.size();
    ids.push_back(v);
    decoded.push_back(tok.decode(v));
  }
  std::ofstream out(out_path, std::ios::binary);
  out << nlohmann::json{{"ids", ids}, {"decoded", decoded}, {"seconds", seconds}, {"bytes", bytes},
                        {"tokens", tokens}}
             .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return out ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "write-json" && argc == 4) {
      std::ofstream(argv[3], std::ios::binary) << load("gguf", argv[2]).to_tokenizer_json().dump();
      return 0;
    }
    if (cmd == "default-text" && argc == 3) {
      std::ofstream(argv[2], std::ios::binary)
          << selq::runtime::default_text(selq::runtime::DefaultTextUse::Evaluation).text;
      return 0;
    }
    if (cmd == "encode" && argc == 6) return encode(load(argv[2], argv[3]), argv[4], argv[5]);
    std::fprintf(stderr, "usage: see the comment at the top of tokenizer_driver.cpp\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
}
