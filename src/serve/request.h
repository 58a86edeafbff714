#pragma once
// What a client may ask of `selq serve` (docs/SERVE.md): the OpenAI-style
// completion and chat requests lm-evaluation-harness sends, read from JSON and
// checked field by field. A request that cannot be served is a RequestError
// naming the field and why (the server answers 400 with that text).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/text/chatml.h"

namespace selq::serve {

struct RequestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One prompt: text to tokenize, or token ids as given.
struct Prompt {
  std::string text;
  std::vector<std::int32_t> ids;
  bool is_ids{false};
};

// POST /v1/completions (and /v1/chat/completions once its messages are
// rendered into one prompt).
struct CompletionRequest {
  std::vector<Prompt> prompts;        // one choice each, in order
  std::int64_t max_tokens{16};        // new tokens per prompt (0: score the prompt only)
  std::vector<std::string> stop;      // generation ends before the first of these (at most 4)
  bool echo{false};                   // the prompt comes back before the completion, with its logprobs
  int logprobs{-1};                   // top alternatives per token (-1: no logprobs at all; 0..20)
  std::string model;                  // as sent; answered with the served name
};

using ChatMessage = runtime::ChatTurn;

struct ChatRequest {
  std::vector<ChatMessage> messages;
  std::int64_t max_tokens{256};
  std::vector<std::string> stop;
  std::string model;
};

// The limits a request is checked against.
struct RequestLimits {
  std::size_t max_prompts{64};         // prompts in one request
  std::int64_t max_tokens{4096};       // max_tokens
  std::int64_t vocab{0};               // token ids must be below this
};

// A list of token ids, each checked against the vocabulary (empty allowed).
std::vector<std::int32_t> token_ids(const nlohmann::json& a, const RequestLimits& limits);

// The body as JSON (RequestError when it is not).
nlohmann::json parse_body(const std::string& body);
CompletionRequest completion_request(const nlohmann::json& j, const RequestLimits& limits);
ChatRequest chat_request(const nlohmann::json& j, const RequestLimits& limits);

}  // namespace selq::serve
