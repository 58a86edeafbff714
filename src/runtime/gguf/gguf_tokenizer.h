#pragma once
// A GGUF file's tokenizer.ggml.* metadata as the runtime's Tokenizer (the
// "gpt2" byte-level BPE model only; llama.cpp's pre-tokenizer names).
#include "runtime/gguf/gguf.h"
#include "runtime/text/tokenizer.h"

namespace selq::runtime {

Tokenizer tokenizer_from_gguf(const GgufFile& gguf);

}  // namespace selq::runtime
