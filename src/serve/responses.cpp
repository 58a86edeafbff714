#include "serve/responses.h"

#include <ctime>

namespace selq::serve {
namespace {

std::string piece(const runtime::Tokenizer& tok, std::int32_t id) {
  return tok.decode(std::span<const std::int32_t>(&id, 1));
}

nlohmann::json top_dict(const runtime::Tokenizer& tok, const std::vector<std::pair<std::int32_t, float>>& top) {
  nlohmann::json d = nlohmann::json::object();
  for (const auto& [id, lp] : top) {
    const std::string key = piece(tok, id);
    if (!d.contains(key)) d[key] = lp;  // two tokens of one text: the likelier
  }
  return d;
}

// OpenAI's `logprobs` object: tokens, their logprobs, the top alternatives and
// each token's offset in the choice's text.
nlohmann::json logprobs_object(const Sequence& s, const runtime::Tokenizer& tok, bool echo) {
  nlohmann::json tokens = nlohmann::json::array(), lps = nlohmann::json::array(), tops = nlohmann::json::array(),
                 offsets = nlohmann::json::array();
  std::size_t at = 0, k = 0;
  const auto add = [&](std::int32_t id, bool has_logprob) {
    const std::string p = piece(tok, id);
    tokens.push_back(p);
    offsets.push_back(at);
    at += p.size();
    if (has_logprob) {
      lps.push_back(s.logprobs[k]);
      tops.push_back(top_dict(tok, s.top[k]));
      ++k;
    } else {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
    }
  };
  if (echo)
    for (std::size_t i = 0; i < s.prompt.size(); ++i) add(s.prompt[i], i > 0 && s.prompt_logprobs);
  for (std::int32_t id : s.generated) add(id, true);
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

nlohmann::json usage(std::size_t prompt, std::size_t completion) {
  return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

}  // namespace

nlohmann::json completion_response(const std::vector<Sequence>& seqs, const runtime::Tokenizer& tok, bool echo,
                                   const std::string& model, const std::string& id) {
  nlohmann::json choices = nlohmann::json::array();
  std::size_t prompt = 0, completion = 0;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const Sequence& s = seqs[i];
    prompt += s.prompt.size();
    completion += s.generated.size();
    nlohmann::json c = {{"index", i},
                        {"text", (echo ? tok.decode(s.prompt) : std::string()) + s.text},
                        {"finish_reason", s.finish_reason}};
    c["logprobs"] = s.top_logprobs >= 0 ? logprobs_object(s, tok, echo) : nlohmann::json(nullptr);
    choices.push_back(std::move(c));
  }
  return {{"id", id},         {"object", "text_completion"}, {"created", std::time(nullptr)},
          {"model", model},   {"choices", choices},          {"usage", usage(prompt, completion)}};
}

nlohmann::json chat_response(const Sequence& s, const std::string& model, const std::string& id) {
  nlohmann::json choice = {{"index", 0},
                           {"message", {{"role", "assistant"}, {"content", s.text}}},
                           {"finish_reason", s.finish_reason}};
  return {{"id", id},       {"object", "chat.completion"},           {"created", std::time(nullptr)},
          {"model", model}, {"choices", nlohmann::json::array({choice})}, {"usage", usage(s.prompt.size(), s.generated.size())}};
}

nlohmann::json error_body(int status, const std::string& message) {
  const char* type = status == 400 ? "invalid_request_error" : status == 503 ? "overloaded" : "server_error";
  return {{"error", {{"message", message}, {"type", type}, {"code", status}}}};
}

std::string dump(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

}  // namespace selq::serve
