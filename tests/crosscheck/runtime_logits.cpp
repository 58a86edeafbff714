// Dumps selq's runtime logits for the crosscheck_runtime test.
// usage: runtime_logits MODEL_DIR TOKENS_FILE OUT_PREFIX [STEPS]
//   TOKENS_FILE: whitespace-separated token ids.
//   Writes OUT_PREFIX.prefill.f32 (one batch over all tokens) and
//   OUT_PREFIX.cached.f32 (all but the last STEPS tokens as a batch, those one
//   token at a time through the KV cache; STEPS defaults to half the tokens),
//   each [tokens, vocab] little-endian F32.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/model/causal_lm.h"

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    std::cerr << "usage: runtime_logits MODEL_DIR TOKENS_FILE OUT_PREFIX [STEPS]\n";
    return 2;
  }
  try {
    std::vector<std::int32_t> toks;
    std::ifstream in(argv[2]);
    for (std::int32_t t; in >> t;) toks.push_back(t);
    auto model = selq::runtime::load_model(argv[1]);
    auto write = [&](const std::string& path, const std::vector<float>& v) {
      std::ofstream o(path, std::ios::binary);
      o.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
    };
    write(std::string(argv[3]) + ".prefill.f32", model->forward(toks));
    model->reset();
    const std::size_t steps = argc == 5 ? std::stoul(argv[4]) : toks.size() / 2;
    if (steps == 0 || steps >= toks.size()) throw std::invalid_argument("STEPS must be in [1, tokens)");
    const std::size_t half = toks.size() - steps;
    std::vector<float> all = model->forward(std::span(toks).first(half));
    for (std::size_t i = half; i < toks.size(); ++i) {
      auto row = model->forward(std::span(toks).subspan(i, 1), false);
      all.insert(all.end(), row.begin(), row.end());
    }
    write(std::string(argv[3]) + ".cached.f32", all);
    std::cout << "tokens " << toks.size() << " vocab " << model->vocab() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
