// Runtime forward pass vs a naive per-token implementation written
// independently here; KV-cache consistency; config and input errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include <tbb/global_control.h>

#include "core/error.h"
#include "runtime/model/llama.h"
#include "test_model_util.h"

namespace selq::runtime {
namespace {

using testing::TinyLlama;
using testing::write_tiny_llama;
using W = std::map<std::string, std::vector<float>>;

std::string tmpdir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("selq_rt_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// y = W x for W [out, in]
std::vector<float> matvec(const std::vector<float>& w, const std::vector<float>& x, int out) {
  const std::size_t in = x.size();
  std::vector<float> y(static_cast<std::size_t>(out));
  for (int o = 0; o < out; ++o) {
    double s = 0;
    for (std::size_t i = 0; i < in; ++i) s += static_cast<double>(w[o * in + i]) * x[i];
    y[static_cast<std::size_t>(o)] = static_cast<float>(s);
  }
  return y;
}

std::vector<float> rmsnorm(const std::vector<float>& x, const std::vector<float>& g, float eps) {
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(g[i] * x[i] * r);
  return y;
}

// HF rotate_half: out = x*cos + rotate_half(x)*sin, rotate_half = [-x2, x1].
void rope(float* v, int d, int pos, float theta) {
  std::vector<float> r(static_cast<std::size_t>(d));
  for (int i = 0; i < d; ++i) {
    const int f = i % (d / 2);
    const double ang = pos * std::pow(static_cast<double>(theta), -2.0 * f / d);
    const double rot = i < d / 2 ? -v[i + d / 2] : v[i - d / 2];
    r[static_cast<std::size_t>(i)] = static_cast<float>(v[i] * std::cos(ang) + rot * std::sin(ang));
  }
  std::copy(r.begin(), r.end(), v);
}

std::vector<std::vector<float>> naive_logits(const W& w, const TinyLlama& c, const std::vector<std::int32_t>& toks) {
  const int T = static_cast<int>(toks.size()), qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  std::vector<std::vector<float>> x(static_cast<std::size_t>(T));
  const auto& emb = w.at("model.embed_tokens.weight");
  for (int t = 0; t < T; ++t)
    x[t].assign(emb.begin() + toks[t] * c.hidden, emb.begin() + (toks[t] + 1) * c.hidden);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<std::vector<float>> qs, ks, vs;
    for (int t = 0; t < T; ++t) {
      auto h = rmsnorm(x[t], w.at(p + "input_layernorm.weight"), c.eps);
      auto q = matvec(w.at(p + "self_attn.q_proj.weight"), h, qd);
      auto k = matvec(w.at(p + "self_attn.k_proj.weight"), h, kvd);
      for (int hh = 0; hh < c.heads; ++hh) rope(q.data() + hh * c.head_dim, c.head_dim, t, c.theta);
      for (int hh = 0; hh < c.kv_heads; ++hh) rope(k.data() + hh * c.head_dim, c.head_dim, t, c.theta);
      qs.push_back(q);
      ks.push_back(k);
      vs.push_back(matvec(w.at(p + "self_attn.v_proj.weight"), h, kvd));
    }
    std::vector<std::vector<float>> nx = x;
    for (int t = 0; t < T; ++t) {
      std::vector<float> att(static_cast<std::size_t>(qd), 0.0f);
      for (int hh = 0; hh < c.heads; ++hh) {
        const int kh = hh * c.kv_heads / c.heads;  // consecutive query heads share a KV head
        std::vector<double> s(static_cast<std::size_t>(t + 1));
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double d = 0;
          for (int e = 0; e < c.head_dim; ++e) d += qs[t][hh * c.head_dim + e] * ks[j][kh * c.head_dim + e];
          s[j] = d / std::sqrt(static_cast<double>(c.head_dim));
          mx = std::max(mx, s[j]);
        }
        double z = 0;
        for (auto& v : s) z += (v = std::exp(v - mx));
        for (int j = 0; j <= t; ++j)
          for (int e = 0; e < c.head_dim; ++e)
            att[hh * c.head_dim + e] += static_cast<float>(s[j] / z * vs[j][kh * c.head_dim + e]);
      }
      auto o = matvec(w.at(p + "self_attn.o_proj.weight"), att, c.hidden);
      for (int i = 0; i < c.hidden; ++i) nx[t][i] += o[i];
      auto h = rmsnorm(nx[t], w.at(p + "post_attention_layernorm.weight"), c.eps);
      auto g = matvec(w.at(p + "mlp.gate_proj.weight"), h, c.inter);
      auto u = matvec(w.at(p + "mlp.up_proj.weight"), h, c.inter);
      for (int i = 0; i < c.inter; ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
      auto dn = matvec(w.at(p + "mlp.down_proj.weight"), g, c.hidden);
      for (int i = 0; i < c.hidden; ++i) nx[t][i] += dn[i];
    }
    x = nx;
  }
  std::vector<std::vector<float>> out;
  const auto& head = c.tied ? w.at("model.embed_tokens.weight") : w.at("lm_head.weight");
  for (int t = 0; t < T; ++t) out.push_back(matvec(head, rmsnorm(x[t], w.at("model.norm.weight"), c.eps), c.vocab));
  return out;
}

void expect_close(const std::vector<float>& got, const std::vector<std::vector<float>>& ref, int first_row,
                  float tol) {
  const std::size_t V = ref[0].size();
  for (std::size_t r = 0; r < got.size() / V; ++r)
    for (std::size_t i = 0; i < V; ++i)
      ASSERT_NEAR(got[r * V + i], ref[first_row + r][i], tol) << "row " << r << " col " << i;
}

class ModelTest : public ::testing::TestWithParam<bool> {};

TEST_P(ModelTest, PrefillMatchesNaiveReference) {
  TinyLlama c;
  c.tied = GetParam();
  auto dir = tmpdir(c.tied ? "tied" : "untied");
  auto w = write_tiny_llama(dir, c, true);
  auto m = LlamaModel::load(dir);
  std::vector<std::int32_t> toks{1, 5, 9, 63, 0, 17, 22, 22, 40, 3, 8, 11};
  auto ref = naive_logits(w, c, toks);
  auto got = m->forward(toks);
  ASSERT_EQ(got.size(), toks.size() * static_cast<std::size_t>(c.vocab));
  expect_close(got, ref, 0, 2e-4f);
  std::filesystem::remove_all(dir);
}

TEST_P(ModelTest, KvCacheStepsMatchPrefill) {
  TinyLlama c;
  c.tied = GetParam();
  auto dir = tmpdir(c.tied ? "kv_tied" : "kv_untied");
  auto w = write_tiny_llama(dir, c, false);
  auto m = LlamaModel::load(dir);
  std::vector<std::int32_t> toks{4, 7, 33, 2, 2, 61, 19, 5, 44, 12};
  auto ref = naive_logits(w, c, toks);
  m->forward(std::span(toks).first(4));
  for (std::size_t i = 4; i < toks.size(); ++i) {
    auto row = m->forward(std::span(toks).subspan(i, 1), false);
    expect_close(row, ref, static_cast<int>(i), 2e-4f);
  }
  // rollback: forget the last 3 positions and feed different tokens
  m->truncate(7);
  std::vector<std::int32_t> alt{toks.begin(), toks.begin() + 7};
  alt.push_back(50);
  auto alt_ref = naive_logits(w, c, alt);
  expect_close(m->forward(std::span(alt).subspan(7, 1), false), alt_ref, 7, 2e-4f);
  std::filesystem::remove_all(dir);
}

// Prefill and decode give the same bits on 1 and 2 threads (every product,
// attention head and token is computed the same way whatever the split).
TEST_P(ModelTest, ThreadCountDoesNotChangeLogits) {
  TinyLlama c;
  c.tied = GetParam();
  c.vocab = 200;  // several sgemm panels in the head
  auto dir = tmpdir(c.tied ? "thr_tied" : "thr_untied");
  write_tiny_llama(dir, c, true);
  auto m = LlamaModel::load(dir);
  std::vector<std::int32_t> toks{4, 7, 33, 2, 2, 61, 19, 5, 44, 12, 150, 199};
  auto run = [&](int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
    m->reset();
    auto out = m->forward(std::span(toks).first(9));
    for (std::size_t i = 9; i < toks.size(); ++i) {
      auto row = m->forward(std::span(toks).subspan(i, 1), false);
      out.insert(out.end(), row.begin(), row.end());
    }
    return out;
  };
  auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, ModelTest, ::testing::Bool());

// A BF16 checkpoint's weights are read in place from its mapping (nothing
// copied into anonymous memory) and give the same logits as a copy would; the
// model keeps the mapping open, so it runs after the files are gone. F32
// weights are converted, so they are held, not mapped.
TEST(ModelWeights, Bf16IsMappedNotCopied) {
  TinyLlama c;
  auto dir = tmpdir("mapped");
  auto w = write_tiny_llama(dir, c, true);
  auto m = LlamaModel::load(dir);
  std::vector<std::int32_t> toks{1, 5, 9, 63, 0, 17};
  const auto before = m->forward(toks);
  std::filesystem::remove_all(dir);
  for (const Linear* l : m->linears()) {
    EXPECT_TRUE(l->weight.mapped) << l->module;
    EXPECT_EQ(l->weight.resident_bytes(), 0u) << l->module;
  }
  m->reset();
  const auto after = m->forward(toks);
  ASSERT_EQ(before.size(), after.size());
  EXPECT_EQ(0, std::memcmp(before.data(), after.data(), before.size() * sizeof(float)));
  expect_close(after, naive_logits(w, c, toks), 0, 2e-4f);

  auto f32dir = tmpdir("held");
  write_tiny_llama(f32dir, c, false);
  auto f = LlamaModel::load(f32dir);
  for (const Linear* l : f->linears()) EXPECT_FALSE(l->weight.mapped) << l->module;
  std::filesystem::remove_all(f32dir);
}

TEST(ModelConfig, RejectsWhatItCannotRun) {
  nlohmann::json c = {{"model_type", "llama"}, {"hidden_size", 64}, {"intermediate_size", 128},
                      {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 3},
                      {"vocab_size", 10},  {"rms_norm_eps", 1e-5},       {"rope_theta", 10000.0}};
  EXPECT_THROW(llama_config_from_json(c, "x"), Error);  // 4 heads not divisible by 3 KV heads
  c["num_key_value_heads"] = 2;
  EXPECT_NO_THROW(llama_config_from_json(c, "x"));
  c["rope_scaling"] = {{"rope_type", "llama3"}};
  EXPECT_THROW(llama_config_from_json(c, "x"), Error);
}

// transformers 5 writes RoPE as rope_parameters and may nest the decoder as
// text_config; a missing field is an error, never the runtime's guess.
TEST(ModelConfig, ReadsTransformers4And5Forms) {
  const nlohmann::json base = {{"model_type", "llama"}, {"hidden_size", 64},   {"intermediate_size", 128},
                               {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                               {"vocab_size", 10},      {"rms_norm_eps", 1e-6}};
  nlohmann::json v4 = base;
  v4["rope_theta"] = 100000.0;
  v4["rope_scaling"] = nullptr;
  EXPECT_EQ(llama_config_from_json(v4, "x").rope_theta, 100000.0f);
  v4["rope_scaling"] = {{"type", "default"}};
  EXPECT_EQ(llama_config_from_json(v4, "x").rope_theta, 100000.0f);

  nlohmann::json v5 = base;
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 100000.0}};
  v5["dtype"] = "bfloat16";
  EXPECT_EQ(llama_config_from_json(v5, "x").rope_theta, 100000.0f);
  EXPECT_EQ(llama_config_from_json(v5, "x").rms_eps, 1e-6f);

  const nlohmann::json nested = {{"model_type", "llava"}, {"text_config", v5}};
  EXPECT_EQ(llama_config_from_json(nested, "x").rope_theta, 100000.0f);

  auto message = [](const nlohmann::json& c) {
    try {
      llama_config_from_json(c, "src");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(base).find("rope_theta"), std::string::npos) << message(base);
  nlohmann::json yarn = v5;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_NE(message(yarn).find("yarn"), std::string::npos) << message(yarn);
  nlohmann::json per_layer_type = base;
  per_layer_type["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}};
  EXPECT_NE(message(per_layer_type).find("rope_parameters"), std::string::npos);
  nlohmann::json no_eps = v5;
  no_eps.erase("rms_norm_eps");
  EXPECT_NE(message(no_eps).find("rms_norm_eps"), std::string::npos);
}

TEST(ModelInput, RejectsTokenOutsideVocabulary) {
  TinyLlama c;
  auto dir = tmpdir("vocab");
  write_tiny_llama(dir, c, true);
  auto m = LlamaModel::load(dir);
  std::vector<std::int32_t> bad{1, 64};
  EXPECT_THROW(m->forward(bad), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace selq::runtime

namespace selq::runtime {
namespace {

std::vector<std::vector<float>> one_step(LlamaModel& m, int slot, const std::vector<std::int32_t>& tokens,
                                         bool all_logits, bool rowwise) {
  const CausalLM::SequenceStep s{slot, tokens, all_logits};
  return m.forward_steps(std::span(&s, 1), rowwise);
}

// Three prompts of different lengths in three slots, run together step by
// step with rowwise products, give each slot the same logits, bit for bit, as
// running that prompt alone; and close to forward()'s (sgemm) logits.
TEST(ModelSlots, BatchedStepsAreEachSequenceAlone) {
  const std::string dir = tmpdir("slots");
  TinyLlama c;
  c.qkv_bias = true;
  write_tiny_llama(dir, c, true);
  auto batched = LlamaModel::load(dir);
  auto alone = LlamaModel::load(dir);
  const std::vector<std::vector<std::int32_t>> prompts{{1, 5, 9}, {7}, {3, 3, 8, 60, 2, 11}};
  const std::vector<std::vector<std::int32_t>> next{{4, 6}, {13, 2, 40}, {9}};
  batched->reset_slots(3);
  std::vector<CausalLM::SequenceStep> steps;
  for (int i = 0; i < 3; ++i) steps.push_back({i, prompts[static_cast<std::size_t>(i)], false});
  auto first = batched->forward_steps(steps, true);
  steps.clear();
  for (int i = 0; i < 3; ++i) steps.push_back({i, next[static_cast<std::size_t>(i)], true});
  auto second = batched->forward_steps(steps, true);
  for (int i = 0; i < 3; ++i) {
    const auto u = static_cast<std::size_t>(i);
    EXPECT_EQ(batched->cached(i), static_cast<std::int64_t>(prompts[u].size() + next[u].size()));
    alone->reset();
    auto a1 = one_step(*alone, 0, prompts[u], false, true);
    auto a2 = one_step(*alone, 0, next[u], true, true);
    ASSERT_EQ(first[u].size(), static_cast<std::size_t>(c.vocab));  // the last row only
    ASSERT_EQ(second[u].size(), next[u].size() * static_cast<std::size_t>(c.vocab));
    EXPECT_EQ(0, std::memcmp(a1[0].data(), first[u].data(), first[u].size() * sizeof(float))) << "slot " << i;
    EXPECT_EQ(0, std::memcmp(a2[0].data(), second[u].data(), second[u].size() * sizeof(float))) << "slot " << i;
    alone->reset();
    alone->forward(prompts[u], false);
    auto f = alone->forward(next[u], true);
    for (std::size_t k = 0; k < f.size(); ++k) ASSERT_NEAR(f[k], second[u][k], 1e-4f) << "slot " << i << " logit " << k;
  }
  // Rolling one slot back leaves the others as they were.
  batched->truncate(1, 2);
  EXPECT_EQ(batched->cached(2), 1);
  EXPECT_EQ(batched->cached(0), 5);
  std::filesystem::remove_all(dir);
}

TEST(ModelSlots, RejectsRepeatedOrMissingSlots) {
  const std::string dir = tmpdir("slots_bad");
  TinyLlama c;
  write_tiny_llama(dir, c, true);
  auto m = LlamaModel::load(dir);
  m->reset_slots(2);
  const std::vector<std::int32_t> t{1, 2};
  const std::vector<CausalLM::SequenceStep> twice{{1, t, true}, {1, t, true}};
  EXPECT_THROW(m->forward_steps(twice, true), Error);
  const std::vector<CausalLM::SequenceStep> missing{{2, t, true}};
  EXPECT_THROW(m->forward_steps(missing, true), Error);
  EXPECT_THROW(m->reset_slots(0), Error);
  EXPECT_THROW(m->reset_slots(m->max_slots() + 1), Error);
  EXPECT_THROW(m->truncate(0, 2), Error);  // slots 0 and 1 only
  EXPECT_EQ(m->cached(0), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace selq::runtime
