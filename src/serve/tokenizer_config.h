#pragma once
// What `selq serve` reads from the checkpoint's tokenizer_config.json (which
// selq import-gguf writes from the GGUF): the special tokens by text and the
// chat template. selq does not run Jinja: a template in the ChatML form
// (<|im_start|>role ... <|im_end|>, SmolLM2's and Qwen's) is rendered from the
// messages as given (runtime/text/chatml.h, without a template's default system
// message); any other is refused for chat completions, and
// /tokenizer_info hands the template itself to a client that renders it
// (lm-eval's --apply_chat_template does, with jinja2).
#include <string>
#include <vector>

#include "serve/request.h"

namespace selq::serve {

struct TokenizerConfig {
  std::string chat_template;  // as the checkpoint states it ("" when it has none)
  bool chatml{false};         // the ChatML form, which runtime::render_chatml writes
  std::string bos_token, eos_token, pad_token;  // "" when not stated
};

// The directory's tokenizer_config.json; all empty when it has none.
TokenizerConfig read_tokenizer_config(const std::string& checkpoint_dir);

}  // namespace selq::serve
