#include "serve/request.h"

#include <fmt/format.h>

namespace selq::serve {
namespace {

[[noreturn]] void bad(const std::string& what) { throw RequestError(what); }

// Sampling is greedy only: a request for anything else is refused, not
// silently answered greedily (a task scored with sampling would be wrong).
void check_sampling(const nlohmann::json& j) {
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    if (!j["temperature"].is_number()) bad("'temperature' must be a number");
    if (j["temperature"].get<double>() != 0.0)
      bad(fmt::format("'temperature' {} is not served: selq serve decodes greedily (temperature 0)",
                      j["temperature"].dump()));
  }
  if (j.contains("n") && !(j["n"].is_number_integer() && j["n"].get<std::int64_t>() == 1))
    bad("'n' must be 1: one greedy completion per prompt");
  if (j.contains("stream") && j["stream"].is_boolean() && j["stream"].get<bool>())
    bad("'stream' is not served: the whole completion comes in one response");
  if (j.contains("seed") && !j["seed"].is_null() && !j["seed"].is_number_integer()) bad("'seed' must be an integer");
}

std::int64_t max_tokens(const nlohmann::json& j, std::int64_t fallback, const RequestLimits& limits) {
  const char* key = j.contains("max_tokens") ? "max_tokens" : "max_completion_tokens";
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_number_integer()) bad(fmt::format("'{}' must be an integer", key));
  const auto v = j[key].get<std::int64_t>();
  if (v < 0 || v > limits.max_tokens) bad(fmt::format("'{}' {} is outside 0..{}", key, v, limits.max_tokens));
  return v;
}

std::vector<std::string> stops(const nlohmann::json& j) {
  if (!j.contains("stop") || j["stop"].is_null()) return {};
  const auto& s = j["stop"];
  if (s.is_string()) return s.get<std::string>().empty() ? std::vector<std::string>{} : std::vector{s.get<std::string>()};
  if (!s.is_array()) bad("'stop' must be a string or a list of strings");
  if (s.size() > 4) bad(fmt::format("'stop' has {} strings; at most 4", s.size()));
  std::vector<std::string> out;
  for (const auto& e : s) {
    if (!e.is_string()) bad("'stop' must be a string or a list of strings");
    if (!e.get<std::string>().empty()) out.push_back(e.get<std::string>());
  }
  return out;
}

std::string model_name(const nlohmann::json& j) {
  if (!j.contains("model") || j["model"].is_null()) return "";
  if (!j["model"].is_string()) bad("'model' must be a string");
  return j["model"].get<std::string>();
}

bool is_token_list(const nlohmann::json& a) {
  if (!a.is_array() || a.empty()) return false;
  for (const auto& e : a)
    if (!e.is_number_integer()) return false;
  return true;
}

Prompt ids_prompt(const nlohmann::json& a, const RequestLimits& limits) {
  Prompt p;
  p.is_ids = true;
  p.ids = token_ids(a, limits);
  return p;
}

// `prompt`: a string, a list of strings, a list of token ids or a list of such lists.
std::vector<Prompt> prompts(const nlohmann::json& j, const RequestLimits& limits) {
  if (!j.contains("prompt")) bad("'prompt' is missing");
  const auto& p = j["prompt"];
  std::vector<Prompt> out;
  if (p.is_string()) {
    out.push_back({p.get<std::string>(), {}, false});
  } else if (is_token_list(p)) {
    out.push_back(ids_prompt(p, limits));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string()) out.push_back({e.get<std::string>(), {}, false});
      else if (is_token_list(e)) out.push_back(ids_prompt(e, limits));
      else bad("'prompt' must be a string, a list of token ids, or a list of either (none empty)");
    }
  } else {
    bad("'prompt' must be a string, a list of token ids, or a list of either (none empty)");
  }
  if (out.size() > limits.max_prompts)
    bad(fmt::format("{} prompts in one request; at most {}", out.size(), limits.max_prompts));
  return out;
}

}  // namespace

std::vector<std::int32_t> token_ids(const nlohmann::json& a, const RequestLimits& limits) {
  if (!a.is_array()) bad("token ids must be a list of integers");
  std::vector<std::int32_t> ids;
  for (const auto& e : a) {
    if (!e.is_number_integer()) bad("token ids must be a list of integers");
    const auto id = e.get<std::int64_t>();
    if (id < 0 || (limits.vocab > 0 && id >= limits.vocab))
      bad(fmt::format("token id {} is outside the vocabulary (0..{})", id, limits.vocab - 1));
    ids.push_back(static_cast<std::int32_t>(id));
  }
  return ids;
}

nlohmann::json parse_body(const std::string& body) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) bad("the body is not valid JSON");
  if (!j.is_object()) bad("the body must be a JSON object");
  return j;
}

CompletionRequest completion_request(const nlohmann::json& j, const RequestLimits& limits) {
  check_sampling(j);
  CompletionRequest r;
  r.prompts = prompts(j, limits);
  r.max_tokens = max_tokens(j, 16, limits);
  r.stop = stops(j);
  r.model = model_name(j);
  if (j.contains("echo") && !j["echo"].is_null()) {
    if (!j["echo"].is_boolean()) bad("'echo' must be true or false");
    r.echo = j["echo"].get<bool>();
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) {
    if (!j["logprobs"].is_number_integer()) bad("'logprobs' must be an integer (0..20)");
    const auto k = j["logprobs"].get<std::int64_t>();
    if (k < 0 || k > 20) bad(fmt::format("'logprobs' {} is outside 0..20", k));
    r.logprobs = static_cast<int>(k);
  }
  if (r.max_tokens == 0 && !r.echo) bad("'max_tokens' 0 without 'echo' asks for nothing");
  return r;
}

ChatRequest chat_request(const nlohmann::json& j, const RequestLimits& limits) {
  check_sampling(j);
  ChatRequest r;
  if (!j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
    bad("'messages' must be a non-empty list of {role, content}");
  for (const auto& m : j["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      bad("each of 'messages' must be {\"role\": string, \"content\": string}");
    const auto role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      bad(fmt::format("message role '{}' is not one of system, user, assistant", role));
    r.messages.push_back({role, m["content"].get<std::string>()});
  }
  r.max_tokens = max_tokens(j, 256, limits);
  if (r.max_tokens == 0) bad("'max_tokens' must be at least 1 for a chat completion");
  r.stop = stops(j);
  r.model = model_name(j);
  if (j.contains("logprobs") && j["logprobs"].is_boolean() && j["logprobs"].get<bool>())
    bad("'logprobs' is served by /v1/completions (with 'echo'), not by chat completions");
  return r;
}

}  // namespace selq::serve
