#pragma once
// The JSON `selq serve` answers with, in the OpenAI shapes lm-evaluation-harness
// reads (docs/SERVE.md): completions with echo and per-token logprobs, chat
// completions, tokenizer endpoints, errors.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/text/tokenizer.h"
#include "serve/engine.h"

namespace selq::serve {

// A choice per sequence; with `echo` the prompt's text, tokens and logprobs
// (the first token's null) come before the completion's.
nlohmann::json completion_response(const std::vector<Sequence>& seqs, const runtime::Tokenizer& tok, bool echo,
                                   const std::string& model, const std::string& id);
nlohmann::json chat_response(const Sequence& seq, const std::string& model, const std::string& id);
nlohmann::json error_body(int status, const std::string& message);

// The body as text: invalid UTF-8 (a token that is part of a character) replaced.
std::string dump(const nlohmann::json& j);

}  // namespace selq::serve
