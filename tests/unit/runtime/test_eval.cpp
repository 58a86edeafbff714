// Evaluation estimators on hand-computed cases, and end-to-end properties of
// `evaluate` on a tiny model (a model drafting for itself accepts all k
// tokens; KL of a model against itself is 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "calibration/calibrate.h"
#include "core/error.h"
#include "runtime/eval/base_logprobs.h"
#include "runtime/eval/eval.h"
#include "runtime/model/llama.h"
#include "runtime/text/default_text.h"
#include "runtime/model/numerics.h"
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
// Text the tiny tokenizer maps one character to one token ('0'..'o').
const std::string kTinyText = "0123456789:;<=>?@ABCDEFGHIJKLMNOabcdefg0123456789";

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
  const std::string& text = kTinyText;
  auto rep = evaluate(dir, {dir}, text, "inline", {"012", "abc"}, "inline", o);
  ASSERT_EQ(rep.quantized.size(), 1u);
  const auto& q = rep.quantized[0];
  EXPECT_EQ(rep.text_tokens, 40);
  EXPECT_EQ(q.tokens, 37);  // windows of 16,16,8 predict 15+15+7
  EXPECT_DOUBLE_EQ(q.perplexity, rep.base.perplexity);
  EXPECT_GT(rep.base.perplexity, 1.0);
  // Not 0: the base's rows are kept at 16 bits (base_logprobs.h) and the
  // float log-softmax of the other side sums to 1 only within ~1e-7.
  EXPECT_GE(q.kl_mean, 0.0);
  EXPECT_LT(q.kl_mean, 1e-6);
  EXPECT_DOUBLE_EQ(q.top1, 1.0);
  EXPECT_GT(q.steps, 0);
  EXPECT_DOUBLE_EQ(q.accepted_greedy, 3.0);
  EXPECT_NEAR(q.accepted_expected, 3.0, 1e-4);
  auto j = rep.to_json();
  EXPECT_EQ(j["quantized"][0]["top1_agreement"], 1.0);
  EXPECT_NE(rep.table().find("ppl"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(Evaluate, BaseLogProbsCacheGivesTheSameReport) {
  const auto tmp = std::filesystem::temp_directory_path() / ("selq_evalcache_" + std::to_string(::getpid()));
  std::filesystem::remove_all(tmp);
  const std::string dir = (tmp / "model").string(), cache = (tmp / "cache").string();
  testing::TinyLlama c;
  testing::write_tiny_llama(dir, c, true);
  write_tiny_tokenizer(dir);
  EvalOptions o;
  o.context = 16;
  o.max_tokens = 40;
  o.gen_tokens = 6;
  o.draft_k = 3;
  o.base_cache_dir = cache;
  const std::string& text = kTinyText;
  auto first = evaluate(dir, {dir}, text, "inline", {"012"}, "inline", o);
  EXPECT_FALSE(first.base_cache_hit);
  ASSERT_FALSE(first.base_cache_file.empty());
  ASSERT_TRUE(std::filesystem::exists(first.base_cache_file));
  auto second = evaluate(dir, {dir}, text, "inline", {"012"}, "inline", o);
  EXPECT_TRUE(second.base_cache_hit);
  EXPECT_EQ(second.base_cache_file, first.base_cache_file);
  auto strip = [](nlohmann::json j) {  // everything but timings and the cache flag
    j.erase("base_logprobs");
    j["base"].erase("seconds");
    j["quantized"][0].erase("seconds");
    return j;
  };
  EXPECT_EQ(strip(first.to_json()).dump(), strip(second.to_json()).dump());  // dump: NaN intervals print as null
  EXPECT_DOUBLE_EQ(second.base.perplexity, first.base.perplexity);

  // Another window length or text is another entry; a truncated file is recomputed.
  o.context = 8;
  auto other = evaluate(dir, {dir}, text, "inline", {}, "inline", o);
  EXPECT_FALSE(other.base_cache_hit);
  EXPECT_NE(other.base_cache_file, first.base_cache_file);
  std::filesystem::resize_file(other.base_cache_file, std::filesystem::file_size(other.base_cache_file) - 1);
  auto again = evaluate(dir, {dir}, text, "inline", {}, "inline", o);
  EXPECT_FALSE(again.base_cache_hit);
  EXPECT_DOUBLE_EQ(again.quantized[0].kl_mean, other.quantized[0].kl_mean);
  EXPECT_TRUE(evaluate(dir, {dir}, text, "inline", {}, "inline", o).base_cache_hit);

  // A changed base (other weights, same shapes) does not read the old entry.
  testing::write_tiny_llama(dir, c, true, 8);
  EXPECT_FALSE(evaluate(dir, {dir}, text, "inline", {}, "inline", o).base_cache_hit);
  std::filesystem::remove_all(tmp);
}

TEST(BaseLogProbs, RowsRoundTripWithinOneStep) {
  const std::int64_t V = 1000;
  std::vector<float> logits(V);
  for (std::int64_t i = 0; i < V; ++i) logits[static_cast<std::size_t>(i)] = std::sin(0.37f * static_cast<float>(i)) * 9.0f;
  log_softmax_inplace(logits.data(), V);
  BaseLogProbs b(2, V);
  b.set_row(1, logits.data(), 17);
  std::vector<float> back(V);
  b.decode_row(1, back.data());
  const float lo = *std::min_element(logits.begin(), logits.end());
  double psum = 0;
  for (std::int64_t i = 0; i < V; ++i) {
    EXPECT_NEAR(back[static_cast<std::size_t>(i)], logits[static_cast<std::size_t>(i)], -lo / 65535.0 + 1e-5) << i;
    psum += std::exp(static_cast<double>(back[static_cast<std::size_t>(i)]));
  }
  EXPECT_NEAR(psum, 1.0, 1e-6);
  EXPECT_EQ(b.target_logp(1), logits[17]);
  EXPECT_EQ(b.top(1), std::max_element(logits.begin(), logits.end()) - logits.begin());
  EXPECT_LT(kl_divergence(back.data(), logits.data(), V), 1e-6);

  const auto path = (std::filesystem::temp_directory_path() / ("selq_blp_" + std::to_string(::getpid()))).string();
  b.save(path, "k1");
  EXPECT_FALSE(BaseLogProbs::load(path, "k2"));  // written for another key
  auto r = BaseLogProbs::load(path, "k1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rows(), 2);
  std::vector<float> again(V);
  r->decode_row(1, again.data());
  EXPECT_EQ(again, back);
  EXPECT_FALSE(std::filesystem::exists(path + ".selq-tmp"));
  std::filesystem::remove(path);
}

TEST(Calibrate, RecordsInputAmaxPerLinear) {
  auto dir = (std::filesystem::temp_directory_path() / ("selq_calib_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  testing::TinyLlama c;
  testing::write_tiny_llama(dir, c, true);
  write_tiny_tokenizer(dir);
  auto r = calibration::calibrate(dir, "0123456789:;<=>?@ABCDEFG", "inline", 0, 8);
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

namespace selq::runtime {
namespace {

// Acceptance of a draft unlike the base (other random weights, so the drafts
// are often rejected and prompts finish at different steps): the per-prompt
// sums are the same bits whether prompts run one at a time or in batches.
TEST(Evaluate, AcceptanceIsTheSameForAnyPromptBatch) {
  const auto tmp = std::filesystem::temp_directory_path() / ("selq_evalbatch_" + std::to_string(::getpid()));
  std::filesystem::remove_all(tmp);
  const std::string base = (tmp / "base").string(), draft = (tmp / "draft").string();
  testing::TinyLlama c;
  testing::write_tiny_llama(base, c, true, 7);
  testing::write_tiny_llama(draft, c, true, 8);
  write_tiny_tokenizer(base);
  write_tiny_tokenizer(draft);
  const std::string& text = kTinyText;
  const std::vector<std::string> prompts{"012", "abc", "9", "XYZ0", "klmno", "@@", "ab"};
  std::vector<std::vector<PromptSums>> sums;
  for (int batch : {1, 3, 16}) {
    EvalOptions o;
    o.context = 16;
    o.max_tokens = 16;
    o.gen_tokens = 10;
    o.draft_k = 3;
    o.prompt_batch = batch;
    auto rep = evaluate(base, {draft}, text, "inline", prompts, "inline", o);
    sums.push_back(rep.quantized.at(0).prompt_sums);
  }
  ASSERT_EQ(sums[0].size(), prompts.size());
  std::int64_t steps = 0;
  double accepted = 0;
  for (const auto& p : sums[0]) {
    steps += p.steps;
    accepted += p.greedy;
  }
  EXPECT_GT(steps, static_cast<std::int64_t>(prompts.size()));  // more than one step per prompt
  EXPECT_LT(accepted, 3.0 * static_cast<double>(steps));         // not every draft accepted
  for (std::size_t b = 1; b < sums.size(); ++b)
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(sums[b][i].steps, sums[0][i].steps) << "batch variant " << b << " prompt " << i;
      EXPECT_EQ(sums[b][i].greedy, sums[0][i].greedy) << "batch variant " << b << " prompt " << i;
      EXPECT_EQ(sums[b][i].expected, sums[0][i].expected) << "batch variant " << b << " prompt " << i;
    }
  std::filesystem::remove_all(tmp);
}

}  // namespace
}  // namespace selq::runtime
