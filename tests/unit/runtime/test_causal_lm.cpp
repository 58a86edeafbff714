// The model seam (runtime::load_model by model_type) and the DeepSeek-V3
// config reader: what it runs, and the one-line refusals of what it does not.
// The forward pass itself is checked against transformers by
// tests/crosscheck/deepseek_crosscheck.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "../small_synth.h"
#include "core/error.h"
#include "pipeline/synth.h"
#include "recipe/names.h"
#include "runtime/model/architectures.h"
#include "runtime/model/causal_lm.h"
#include "runtime/model/deepseek_v3.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/llama.h"
#include "runtime/text/tokenizer.h"
#include "test_model_util.h"

namespace selq::runtime {
namespace {

std::string tmpdir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("selq_clm_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

// DeepSeek-V3's released config.json, shrunk (transformers 4 form: rope_theta
// + rope_scaling with "type", no rope_interleave key).
nlohmann::json deepseek_config() {
  return {{"model_type", "deepseek_v3"},
          {"hidden_size", 64},
          {"intermediate_size", 96},
          {"moe_intermediate_size", 32},
          {"num_hidden_layers", 3},
          {"num_attention_heads", 4},
          {"num_key_value_heads", 4},
          {"vocab_size", 100},
          {"q_lora_rank", 48},
          {"kv_lora_rank", 32},
          {"qk_nope_head_dim", 16},
          {"qk_rope_head_dim", 8},
          {"v_head_dim", 16},
          {"n_routed_experts", 8},
          {"n_shared_experts", 1},
          {"num_experts_per_tok", 2},
          {"n_group", 4},
          {"topk_group", 2},
          {"first_k_dense_replace", 1},
          {"norm_topk_prob", true},
          {"routed_scaling_factor", 2.5},
          {"rms_norm_eps", 1e-6},
          {"hidden_act", "silu"},
          {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"},
          {"moe_layer_freq", 1},
          {"max_position_embeddings", 163840},
          {"rope_theta", 10000},
          {"rope_scaling",
           {{"beta_fast", 32},
            {"beta_slow", 1},
            {"factor", 40},
            {"mscale", 1.0},
            {"mscale_all_dim", 1.0},
            {"original_max_position_embeddings", 4096},
            {"type", "yarn"}}}};
}

std::string message_of(const nlohmann::json& c) {
  try {
    deepseek_v3_config_from_json(c, "src");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DeepseekConfig, ReadsTheReleasedForm) {
  const auto c = deepseek_v3_config_from_json(deepseek_config(), "x");
  EXPECT_EQ(c.q_lora_rank, 48);
  EXPECT_EQ(c.qk_dim(), 24);
  EXPECT_TRUE(c.rope_interleave);  // transformers' default when the key is absent
  EXPECT_EQ(c.rope.type, "yarn");
  EXPECT_EQ(c.rope.factor, 40.0);
  EXPECT_EQ(c.rope.original_max_positions, 4096);
  EXPECT_EQ(c.rope.theta, 10000.0);
  // mscale == mscale_all_dim: cos/sin are not scaled (the softmax scale is, by mscale^2).
  EXPECT_FLOAT_EQ(rope_tables(c.rope, 8, c.max_positions).attention_factor, 1.0f);
  EXPECT_NEAR(yarn_get_mscale(40, 1.0), 0.1 * std::log(40.0) + 1, 1e-12);

  auto v5 = deepseek_config();
  v5.erase("rope_theta");
  nlohmann::json rp = v5["rope_scaling"];
  v5.erase("rope_scaling");
  rp.erase("type");
  rp["rope_type"] = "yarn";
  rp["rope_theta"] = 10000.0;
  v5["rope_parameters"] = rp;
  v5["q_lora_rank"] = nullptr;
  v5["rope_interleave"] = false;
  const auto c5 = deepseek_v3_config_from_json(v5, "x");
  EXPECT_EQ(c5.q_lora_rank, 0);
  EXPECT_FALSE(c5.rope_interleave);
  EXPECT_EQ(c5.rope.factor, 40.0);
  const auto t4 = rope_tables(c.rope, 8, 0), t5 = rope_tables(c5.rope, 8, 0);
  EXPECT_EQ(t4.inv_freq, t5.inv_freq);
  // YaRN interpolates the low frequencies (by 1/factor) and keeps the high ones.
  const auto plain = rope_tables(RopeConfig{10000.0}, 8, 0);
  EXPECT_EQ(t4.inv_freq[0], plain.inv_freq[0]);
  EXPECT_NEAR(t4.inv_freq[3], plain.inv_freq[3] / 40.0f, 1e-9);

  auto kimi = deepseek_config();
  kimi["model_type"] = "kimi_k2";
  EXPECT_NO_THROW(deepseek_v3_config_from_json(kimi, "x"));
}

// transformers 5.24's _compute_yarn_parameters for DeepSeek-V3's RoPE (dim 64,
// factor 40, original 4096, beta 32/1) with mscale 0.707 / mscale_all_dim 1:
// inv_freq[i] for a few i and the attention factor, printed from Python.
TEST(DeepseekConfig, YarnTablesEqualTransformers) {
  RopeConfig r;
  r.theta = 10000;
  r.type = "yarn";
  r.factor = 40;
  r.original_max_positions = 4096;
  r.mscale = 0.707;
  r.mscale_all_dim = 1.0;
  const auto t = rope_tables(r, 64, 163840);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_NEAR(t.attention_factor, 0.9210423553163399, 1e-7);
  const std::pair<int, double> ref[] = {{0, 1.0},
                                        {5, 0.23713736236095428},
                                        {10, 0.05623412877321243},
                                        {13, 0.01837814413011074},
                                        {20, 0.0007905694073997438},
                                        {31, 3.3338035336782923e-06}};
  for (const auto& [i, v] : ref) EXPECT_NEAR(t.inv_freq[static_cast<std::size_t>(i)], v, 2e-7 * v) << i;
}

TEST(DeepseekConfig, RefusesWhatItDoesNotImplementNamingTheField) {
  struct Case {
    const char* key;
    nlohmann::json value;
    const char* named;
  };
  const Case cases[] = {
      {"scoring_func", "softmax", "scoring_func"},
      {"topk_method", "group_limited_greedy", "topk_method"},
      {"hidden_act", "gelu", "hidden_act"},
      {"moe_layer_freq", 2, "moe_layer_freq"},
      {"num_key_value_heads", 2, "num_key_value_heads"},
      {"n_group", 3, "n_group"},  // 8 experts do not split into 3 groups
  };
  for (const auto& k : cases) {
    auto c = deepseek_config();
    c[k.key] = k.value;
    const std::string m = message_of(c);
    EXPECT_NE(m.find(k.named), std::string::npos) << k.key << ": " << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  for (const char* required : {"n_group", "topk_group", "num_experts_per_tok", "routed_scaling_factor",
                               "first_k_dense_replace", "kv_lora_rank", "rms_norm_eps"}) {
    auto c = deepseek_config();
    c.erase(required);
    EXPECT_NE(message_of(c).find(required), std::string::npos) << message_of(c);
  }
  auto llama3 = deepseek_config();
  llama3["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
  EXPECT_NE(message_of(llama3).find("llama3"), std::string::npos) << message_of(llama3);
  auto odd_yarn = deepseek_config();
  odd_yarn["rope_scaling"]["extrapolation_factor"] = 1.0;
  EXPECT_NE(message_of(odd_yarn).find("rope_scaling.extrapolation_factor"), std::string::npos)
      << message_of(odd_yarn);
  // DeepSeek-V2's own router is softmax + greedy: a V2 config must state V3's.
  auto v2 = deepseek_config();
  v2["model_type"] = "deepseek_v2";
  v2.erase("scoring_func");
  EXPECT_NE(message_of(v2).find("scoring_func"), std::string::npos) << message_of(v2);
  v2["scoring_func"] = "sigmoid";
  EXPECT_NO_THROW(deepseek_v3_config_from_json(v2, "x"));
}

TEST(ModelSeam, LoadsByModelTypeAndRefusesUnknownOnes) {
  testing::TinyLlama t;
  const auto dir = tmpdir("seam");
  testing::write_tiny_llama(dir, t, true);
  auto seam = load_model(dir);
  EXPECT_EQ(seam->model_type(), "llama");
  auto llama = LlamaModel::load(dir);
  const std::vector<std::int32_t> toks{1, 5, 9, 2};
  EXPECT_EQ(seam->forward(toks), llama->forward(toks));  // the seam adds nothing to the math
  EXPECT_EQ(seam->vocab(), t.vocab);
  EXPECT_NE(seam->find_linear("model.layers.1.mlp.down_proj"), nullptr);
  EXPECT_EQ(seam->linears().size(), static_cast<std::size_t>(7 * t.layers));

  nlohmann::json cfg;
  std::ifstream(dir + "/config.json") >> cfg;
  cfg["model_type"] = "gpt_neox";
  std::ofstream(dir + "/config.json") << cfg.dump();
  try {
    load_model(dir);
    ADD_FAILURE() << "gpt_neox loaded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'gpt_neox'"), std::string::npos) << m;
    EXPECT_NE(m.find("deepseek_v3"), std::string::npos) << m;  // and says what it runs
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
  // A loader called directly checks the type against the same rows.
  cfg["model_type"] = "deepseek_v3";
  std::ofstream(dir + "/config.json") << cfg.dump();
  try {
    LlamaModel::load(dir);
    ADD_FAILURE() << "deepseek_v3 loaded as Llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model_type 'deepseek_v3' is not a llama decoder"), std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

// One row per model_type: each names its family and runs layer by layer.
TEST(ModelSeam, RowsNameFamilies) {
  for (const char* mt : {"llama", "mistral", "qwen2"}) EXPECT_STREQ(find_runtime_architecture(mt)->family, "llama");
  for (const char* mt : {"deepseek_v3", "kimi_k2", "deepseek_v2"})
    EXPECT_STREQ(find_runtime_architecture(mt)->family, "deepseek-v3");
  EXPECT_EQ(find_runtime_architecture("kimi_k3"), nullptr);  // selq synth --arch kimi-k3: recipe tests only
  EXPECT_EQ(runtime_model_types().size(), runtime_architectures().size());
  EXPECT_EQ(layer_by_layer_model_types_text(), "llama, mistral, qwen2, deepseek_v3, kimi_k2 and deepseek_v2");
}

// Whether one of `family`'s templates named `template_name` picks `module`.
bool picked_by(const recipe::detail::RecipeFamily& family, const char* template_name, std::string_view module,
               const recipe::detail::ArchContext& ctx) {
  for (const auto& t : *family.templates)
    if (std::string_view(t.name) == template_name && t.matches(recipe::detail::NameInfo(module), ctx)) return true;
  return false;
}

// selq synth's rows against what it writes, the recipe families and what the
// runtime runs: a row names a recipe family whose @experts picks its routed
// experts and whose @attention picks its attention projections; a row written
// with a tokenizer is an architecture the runtime has a row for, of the same
// family; a row says it has routed experts exactly when its tensors do.
TEST(ModelSeam, SynthRowsAgreeWithTheirOutputAndTheRuntime) {
  for (const auto& a : pipeline::synth_architectures()) {
    pipeline::SynthOptions o;
    o.arch = a.name;
    o.scale = 64;
    o.layers = 2;
    o.vocab = 512;
    const auto m = pipeline::describe_synth_model(o);
    const std::string model_type = m.config.at("model_type").get<std::string>();
    const auto* family = recipe::detail::find_recipe_family(a.family);
    ASSERT_NE(family, nullptr) << a.name << ": " << a.family;
    if (a.with_tokenizer) {
      const auto* runtime_row = find_runtime_architecture(model_type);
      ASSERT_NE(runtime_row, nullptr) << a.name << ": " << model_type;
      EXPECT_EQ(std::string(runtime_row->family), a.family) << a.name;
    }
    const auto ctx = recipe::detail::make_arch_context(m.config);
    bool experts = false;
    for (const auto& t : m.tensors) {
      if (!t.info.name.ends_with(".weight")) continue;
      const std::string module = t.info.name.substr(0, t.info.name.size() - 7);
      if (module.find(".mlp.experts.") != std::string::npos) {
        experts = true;
        EXPECT_TRUE(picked_by(*family, "experts", module, ctx)) << a.name << ": " << module;
      }
      if (module.find(".self_attn.") != std::string::npos && module.ends_with("_proj") &&
          !module.ends_with("_res_proj")) {
        EXPECT_TRUE(picked_by(*family, "attention", module, ctx)) << a.name << ": " << module;
      }
    }
    EXPECT_EQ(a.moe, experts) << a.name;
  }
  EXPECT_THROW(pipeline::synth_architecture("gpt2"), Error);
}

// Every runtime row's family is a recipe family (its recipes' `arch:`).
TEST(ModelSeam, RuntimeRowsNameRecipeFamilies) {
  for (const auto& a : runtime_architectures())
    EXPECT_NE(recipe::detail::find_recipe_family(a.family), nullptr) << a.model_type << ": " << a.family;
}

// `selq synth --arch kimi-k2`: DeepSeek-V3's code under model_type kimi_k2 with
// Kimi-K2's router (one group): the runtime loads it as the deepseek-v3 family
// and routes every token to num_experts_per_tok experts.
TEST(ModelSeam, SynthKimiK2RunsAsTheDeepseekFamily) {
  const auto dir = std::filesystem::temp_directory_path() / ("selq-kimi-k2-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  pipeline::write_synth_checkpoint(test::small_moe_synth("kimi-k2", 6), dir.string());
  auto model = load_model(dir.string());
  auto* ds = dynamic_cast<DeepseekV3Model*>(model.get());
  ASSERT_NE(ds, nullptr);
  EXPECT_EQ(ds->model_type(), "kimi_k2");
  EXPECT_EQ(ds->config().n_group, 1);
  EXPECT_EQ(ds->config().topk_group, 1);
  EXPECT_EQ(ds->config().experts_per_token, 2);
  EXPECT_FLOAT_EQ(ds->config().routed_scaling, 2.827f);
  const std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> x = model->embed(ids);
  model->forward_layer(0, x.data(), 10);
  model->forward_layer(1, x.data(), 10);
  std::int64_t routed = 0;
  for (std::int64_t n : ds->routing_counts()[1]) routed += n;
  EXPECT_EQ(routed, 20);  // 10 tokens x 2 experts, in its one MoE layer
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace selq::runtime
