// Evaluation estimators on hand-computed cases, and end-to-end properties of
// `evaluate` on a tiny model (a model drafting for itself accepts all k
// tokens; KL of a model against itself is 0).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "runtime/calibrate.h"
#include "runtime/eval.h"
#include "runtime/model.h"
#include "test_model_util.h"

namespace selq::runtime {
namespace {

std::vector<float> logv(std::vector<double> p) {
  std::vector<float> r;
  for (double x : p) r.push_back(static_cast<float>(std::log(x)));
  return r;
}

TEST(EvalMath, KlDivergenceByHand) {
  auto p = logv({0.5, 0.25, 0.25}), q = logv({0.25, 0.25, 0.5});
  // 0.5 ln 2 + 0 + 0.25 ln 0.5
  EXPECT_NEAR(kl_divergence(p.data(), q.data(), 3), 0.25 * std::log(2.0), 1e-6);
  EXPECT_NEAR(kl_divergence(p.data(), p.data(), 3), 0.0, 1e-9);
}

TEST(EvalMath, OverlapIsSumOfMinima) {
  auto p = logv({0.7, 0.2, 0.1}), q = logv({0.1, 0.3, 0.6});
  EXPECT_NEAR(overlap_probability(p.data(), q.data(), 3), 0.1 + 0.2 + 0.1, 1e-6);
  EXPECT_NEAR(overlap_probability(p.data(), p.data(), 3), 1.0, 1e-6);
}

TEST(EvalMath, ExpectedAcceptedIsSumOfPrefixProducts) {
  EXPECT_NEAR(expected_accepted({0.5, 0.5, 0.5}), 0.5 + 0.25 + 0.125, 1e-12);
  EXPECT_NEAR(expected_accepted({1, 1, 1, 1, 1, 1, 1}), 7.0, 1e-12);
  EXPECT_NEAR(expected_accepted({0.9, 0.0, 1.0}), 0.9, 1e-12);
}

TEST(EvalPrompts, ReadsQuestionsAndRejectsBadLines) {
  auto path = std::filesystem::temp_directory_path() / ("selq_prompts_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << "{\"question\": \"a?\", \"answer\": \"1\"}\n\n{\"prompt\": \"b\"}\n{\"question\": \"c\"}\n";
  auto p = read_prompts_jsonl(path.string(), 2);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0], "a?");
  EXPECT_EQ(p[1], "b");
  std::ofstream(path) << "not json\n";
  EXPECT_THROW(read_prompts_jsonl(path.string(), 0), Error);
  std::filesystem::remove(path);
}

// A tokenizer.json with a byte-level vocabulary of the 64 tokens the tiny
// model has: ids 0..63 for bytes 'A'..., no merges.
void write_tiny_tokenizer(const std::string& dir) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int i = 0; i < 64; ++i) vocab[std::string(1, static_cast<char>('0' + i))] = i;  // '0'..'o'
  nlohmann::json tj = {
      {"version", "1.0"},
      {"added_tokens", nlohmann::json::array()},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
      {"post_processor", nullptr},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::ofstream(dir + "/tokenizer.json") << tj.dump();
}

TEST(Evaluate, SelfComparisonIsPerfect) {
  auto dir = (std::filesystem::temp_directory_path() / ("selq_eval_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  testing::TinyLlama c;
  testing::write_tiny_llama(dir, c, true);
  write_tiny_tokenizer(dir);
  EvalOptions o;
  o.context = 16;
  o.max_tokens = 40;
  o.gen_tokens = 12;
  o.draft_k = 3;
  std::string text = "0123456789:;<=>?@ABCDEFGHIJKLMNOabcdefg0123456789";
  auto rep = evaluate(dir, {dir}, text, "inline", {"012", "abc"}, "inline", o);
  ASSERT_EQ(rep.quantized.size(), 1u);
  const auto& q = rep.quantized[0];
  EXPECT_EQ(rep.text_tokens, 40);
  EXPECT_EQ(q.tokens, 37);  // windows of 16,16,8 predict 15+15+7
  EXPECT_DOUBLE_EQ(q.perplexity, rep.base.perplexity);
  EXPECT_GT(rep.base.perplexity, 1.0);
  EXPECT_NEAR(q.kl_mean, 0.0, 1e-9);
  EXPECT_DOUBLE_EQ(q.top1, 1.0);
  EXPECT_GT(q.steps, 0);
  EXPECT_DOUBLE_EQ(q.accepted_greedy, 3.0);
  EXPECT_NEAR(q.accepted_expected, 3.0, 1e-4);
  auto j = rep.to_json();
  EXPECT_EQ(j["quantized"][0]["top1_agreement"], 1.0);
  EXPECT_NE(rep.table().find("ppl"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Calibrate, RecordsInputAmaxPerLinear) {
  auto dir = (std::filesystem::temp_directory_path() / ("selq_calib_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  testing::TinyLlama c;
  testing::write_tiny_llama(dir, c, true);
  write_tiny_tokenizer(dir);
  auto r = calibrate(dir, "0123456789:;<=>?@ABCDEFG", "inline", 0, 8);
  EXPECT_EQ(r.tokens, 24);
  ASSERT_EQ(r.amax.size(), 14u);  // 2 layers x 7 linears
  for (const auto& [m, v] : r.amax) EXPECT_GT(v, 0.0f) << m;
  // q/k/v (and gate/up) read the same normed activations
  EXPECT_EQ(r.amax.at("model.layers.0.self_attn.q_proj"), r.amax.at("model.layers.0.self_attn.v_proj"));
  EXPECT_EQ(r.amax.at("model.layers.1.mlp.gate_proj"), r.amax.at("model.layers.1.mlp.up_proj"));
  EXPECT_EQ(r.to_json()["format"], "selq-calibration-v1");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace selq::runtime
