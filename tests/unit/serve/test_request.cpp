// selq serve's request checks (serve/request.h) and the engine's
// top-k helper (serve/engine.h): every accepted prompt form, and each refusal
// naming its field. (The server end to end, with lm-eval: tests/e2e/test_serve.py.)
#include <gtest/gtest.h>

#include <string>

#include "serve/engine.h"
#include "serve/request.h"

using namespace selq::serve;
using nlohmann::json;

namespace {

RequestLimits limits() {
  RequestLimits l;
  l.vocab = 100;
  return l;
}

std::string refusal(const json& j, bool chat = false) {
  try {
    if (chat) chat_request(j, limits());
    else completion_request(j, limits());
  } catch (const RequestError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace

TEST(ServeRequest, EveryPromptForm) {
  auto r = completion_request(json{{"prompt", "text"}}, limits());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_FALSE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].text, "text");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.logprobs, -1);

  r = completion_request(json{{"prompt", {5, 6, 7}}, {"max_tokens", 1}, {"echo", true}, {"logprobs", 1}}, limits());
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<std::int32_t>{5, 6, 7}));
  EXPECT_TRUE(r.echo);
  EXPECT_EQ(r.logprobs, 1);

  r = completion_request(json{{"prompt", json::array({json{1, 2}, "b", json{3}})}, {"stop", "\n"}}, limits());
  ASSERT_EQ(r.prompts.size(), 3u);
  EXPECT_TRUE(r.prompts[0].is_ids);
  EXPECT_FALSE(r.prompts[1].is_ids);
  EXPECT_EQ(r.prompts[2].ids, (std::vector<std::int32_t>{3}));
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n"}));
  // lm-eval's loglikelihood request: temperature 0, a seed, echo and one logprob.
  r = completion_request(json::parse(R"({"model": "m", "prompt": [[1, 2]], "temperature": 0, "max_tokens": 1,
                                         "logprobs": 1, "seed": 1234, "echo": true})"),
                         limits());
  EXPECT_EQ(r.model, "m");
}

TEST(ServeRequest, RefusalsNameTheField) {
  EXPECT_EQ(refusal(json::object()), "'prompt' is missing");
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"temperature", 0.5}}).find("greedily"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"n", 2}}).find("'n'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"stream", true}}).find("'stream'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", {1, 100}}}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", {1, -1}}}).find("outside the vocabulary"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", json::array()}}).find("'prompt' must be"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", {1.5}}}).find("'prompt' must be"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"max_tokens", -1}}).find("'max_tokens'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"max_tokens", "3"}}).find("'max_tokens'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"max_tokens", 0}}).find("asks for nothing"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"logprobs", 21}}).find("'logprobs'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"logprobs", true}}).find("'logprobs'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"echo", 1}}).find("'echo'"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"stop", {"a", "b", "c", "d", "e"}}}).find("at most 4"), std::string::npos);
  EXPECT_NE(refusal(json{{"prompt", "a"}, {"stop", 3}}).find("'stop'"), std::string::npos);
  json many = json::array();
  for (int i = 0; i < 65; ++i) many.push_back("p");
  EXPECT_NE(refusal(json{{"prompt", many}}).find("at most 64"), std::string::npos);
  EXPECT_NE(refusal(json{{"messages", json::array()}}, true).find("'messages'"), std::string::npos);
  EXPECT_NE(refusal(json{{"messages", {{{"role", "tool"}, {"content", "x"}}}}}, true).find("role"), std::string::npos);
  EXPECT_NE(refusal(json{{"messages", {{{"role", "user"}}}}}, true).find("content"), std::string::npos);
  EXPECT_THROW(parse_body("{"), RequestError);
  EXPECT_THROW(parse_body("[1]"), RequestError);
  EXPECT_THROW(parse_body("\"\xff\""), RequestError);  // not UTF-8
}

TEST(ServeEngine, TopKByValueThenLowerId) {
  const std::vector<float> v = {-3.0f, 1.0f, 0.5f, 1.0f, -0.25f, 2.0f};
  const auto top = top_k(v.data(), 6, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, 5);
  EXPECT_EQ(top[1].first, 1);  // ties by the lower id
  EXPECT_EQ(top[2].first, 3);
  EXPECT_TRUE(top_k(v.data(), 6, 0).empty());
  EXPECT_EQ(top_k(v.data(), 6, 50).size(), 6u);
}
