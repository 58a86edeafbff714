#include <gtest/gtest.h>

#include <map>
#include <string>

#include "core/error.h"
#include "recipe/recipe.h"
#include "synthetic_names.h"

namespace selq::recipe {
namespace {

using quant::ActMode;
using quant::SchemeKind;
using testing::NameList;

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

Resolution resolve(const std::string& yaml, const NameList& m) {
  return resolve_recipe(parse_recipe(yaml, "r.yaml"), m.tensors, m.config);
}

std::string resolve_error(const std::string& yaml, const NameList& m) {
  try {
    resolve(yaml, m);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

const TensorDecision& find(const Resolution& r, const std::string& tensor) {
  for (const auto& d : r.decisions)
    if (d.tensor == tensor) return d;
  throw std::runtime_error("no tensor " + tensor);
}

// Quantized tensors matching a glob-free suffix, by scheme kind.
std::map<SchemeKind, int> count_kinds(const Resolution& r) {
  std::map<SchemeKind, int> out;
  for (const auto& d : r.decisions)
    if (d.action == Action::Quantize) ++out[d.scheme->kind];
  return out;
}

int count_action(const Resolution& r, Action a) {
  int n = 0;
  for (const auto& d : r.decisions) n += d.action == a;
  return n;
}

std::string all_warnings(const Resolution& r) {
  std::string s;
  for (const auto& w : r.warnings) s += w + "\n";
  return s;
}

TEST(RecipeResolve, DsparkRecipeGivesFiveMxfp4AndTwentyFiveFp8) {
  const NameList m = testing::dspark_names();
  const Recipe recipe = load_recipe(std::string(SELQ_SOURCE_DIR) + "/recipes/dspark-oproj-mxfp4.yaml");
  const Resolution r = resolve_recipe(recipe, m.tensors, m.config);
  ASSERT_EQ(r.decisions.size(), m.tensors.size());
  for (std::size_t i = 0; i < m.tensors.size(); ++i) EXPECT_EQ(r.decisions[i].tensor, m.tensors[i].name);
  EXPECT_TRUE(r.warnings.empty()) << all_warnings(r);

  int mx = 0, fp8 = 0;
  for (const auto& d : r.decisions) {
    if (d.action != Action::Quantize) continue;
    if (d.scheme->kind == SchemeKind::MXFP4) {
      ++mx;
      EXPECT_TRUE(d.module.ends_with(".self_attn.o_proj")) << d.tensor;
      EXPECT_EQ(d.scheme->act, ActMode::MXFP4Dynamic);
      EXPECT_EQ(d.scheme->scale_rule, ScaleRule::Even);
      EXPECT_EQ(d.rule_index, 0);
    } else {
      ++fp8;
      EXPECT_EQ(d.scheme->kind, SchemeKind::FP8Channel) << d.tensor;
      EXPECT_EQ(d.scheme->act, ActMode::FP8PerToken);
      EXPECT_EQ(d.rule_index, 1);
      const bool expected = d.module.ends_with("mlp.gate_proj") || d.module.ends_with("mlp.up_proj") ||
                            d.module.ends_with("mlp.down_proj") || d.module.ends_with("q_b_proj") ||
                            d.module.ends_with("kv_b_proj");
      EXPECT_TRUE(expected) << d.tensor;
    }
  }
  EXPECT_EQ(mx, 5);
  EXPECT_EQ(fp8, 25);

  for (const char* kept : {"model.context_proj.weight", "model.layers.0.self_attn.q_a_proj.weight",
                           "model.layers.4.self_attn.kv_a_proj_with_mqa.weight", "model.embed_tokens.weight",
                           "model.markov_head.weight", "model.confidence_head.weight", "lm_head.weight",
                           "model.norm.weight", "model.layers.2.input_layernorm.weight"}) {
    EXPECT_EQ(find(r, kept).action, Action::Keep) << kept;
    EXPECT_FALSE(find(r, kept).scheme) << kept;
  }
  EXPECT_EQ(find(r, "lm_head.weight").rule_index, kRuleExcluded);
  EXPECT_EQ(find(r, "model.markov_head.weight").rule_index, kRuleExcluded);
  EXPECT_EQ(find(r, "model.context_proj.weight").rule_index, kRuleUnmatched);
  EXPECT_TRUE(find(r, "model.context_proj.weight").eligible);
  EXPECT_FALSE(find(r, "model.embed_tokens.weight").eligible);
  EXPECT_EQ(find(r, "model.norm.weight").rule_index, kRuleNotEligible);
  EXPECT_EQ(find(r, "model.layers.0.self_attn.o_proj.weight").module, "model.layers.0.self_attn.o_proj");
}

TEST(RecipeResolve, FirstMatchWins) {
  const NameList m = testing::llama_names();
  const Resolution r = resolve(
      "name: x\narch: llama\nrules:\n"
      "  - match: '*.o_proj'\n    scheme: mxfp4\n"
      "  - match: '@attention'\n    scheme: fp8-channel\n"
      "  - match: '*.o_proj'\n    scheme: nvfp4\n",
      m);
  EXPECT_EQ(find(r, "model.layers.1.self_attn.o_proj.weight").scheme->kind, SchemeKind::MXFP4);
  EXPECT_EQ(find(r, "model.layers.1.self_attn.q_proj.weight").scheme->kind, SchemeKind::FP8Channel);
  EXPECT_EQ(find(r, "model.layers.1.self_attn.q_proj.weight").rule_index, 1);
  EXPECT_FALSE(find(r, "model.layers.1.mlp.up_proj.weight").scheme);
  // The third rule matched names but decided nothing.
  EXPECT_HAS(all_warnings(r), "r.yaml:8:5: rule decides no tensor");
}

TEST(RecipeResolve, ExcludeWinsOverEarlierRulesAndDefault) {
  const NameList m = testing::llama_names();
  const Resolution r = resolve(
      "name: x\narch: llama\nexclude: ['@layer:1']\nrules:\n"
      "  - match: 'model.layers.*.self_attn.o_proj'\n    scheme: mxfp4\n"
      "default: fp8-channel\n",
      m);
  const auto& o1 = find(r, "model.layers.1.self_attn.o_proj.weight");
  EXPECT_EQ(o1.action, Action::Keep);
  EXPECT_EQ(o1.rule_index, kRuleExcluded);
  EXPECT_HAS(o1.reason, "@layer:1");
  EXPECT_EQ(find(r, "model.layers.1.mlp.down_proj.weight").action, Action::Keep);
  EXPECT_EQ(find(r, "model.layers.0.self_attn.o_proj.weight").scheme->kind, SchemeKind::MXFP4);
  const auto& d0 = find(r, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(d0.scheme->kind, SchemeKind::FP8Channel);
  EXPECT_EQ(d0.rule_index, kRuleDefault);
  // The default never reaches embeddings, norms or lm_head.
  EXPECT_EQ(find(r, "lm_head.weight").action, Action::Keep);
  EXPECT_TRUE(find(r, "lm_head.weight").eligible);
  EXPECT_TRUE(find(r, "lm_head.weight").protected_name);
  EXPECT_EQ(find(r, "model.embed_tokens.weight").action, Action::Keep);
  EXPECT_EQ(find(r, "model.norm.weight").action, Action::Keep);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 6);  // layer 0 minus o_proj
}

TEST(RecipeResolve, KeepRuleCarvesOutOfBroaderRule) {
  const NameList m = testing::llama_names();
  const Resolution r = resolve(
      "name: x\narch: llama\nrules:\n"
      "  - match: '*.down_proj'\n    scheme: keep\n"
      "  - match: ['@attention', '@mlp']\n    scheme: fp8-channel\n",
      m);
  const auto& d = find(r, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(d.action, Action::Keep);
  EXPECT_EQ(d.rule_index, 0);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 12);
}

TEST(RecipeResolve, ProtectedTensorsNeedAnExplicitName) {
  const NameList m = testing::kimi_names();
  // A wildcard that happens to cover the router does not quantize it...
  Resolution r = resolve("name: x\narch: kimi-k3\nrules:\n  - match: 'model.layers.*.mlp.*'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(find(r, "model.layers.2.mlp.gate.weight").action, Action::Keep);
  EXPECT_EQ(find(r, "model.layers.2.mlp.gate.weight").reason, "router");
  EXPECT_EQ(find(r, "model.layers.2.mlp.experts.0.up_proj.weight").action, Action::Quantize);
  EXPECT_HAS(all_warnings(r), "protected tensor");
  // ...nor does a template...
  r = resolve("name: x\narch: kimi-k3\nrules:\n  - match: '@heads'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(find(r, "lm_head.weight").action, Action::Keep);
  // ...but a spelled-out last component or a regex does.
  r = resolve("name: x\narch: kimi-k3\nrules:\n  - match: ['*.mlp.gate', 're:lm_head']\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(find(r, "model.layers.2.mlp.gate.weight").action, Action::Quantize);
  EXPECT_EQ(find(r, "lm_head.weight").action, Action::Quantize);
  EXPECT_EQ(find(r, "model.embed_tokens.weight").action, Action::Keep);
}

TEST(RecipeResolve, KimiTemplates) {
  const NameList m = testing::kimi_names();
  auto matched = [&](const std::string& pattern) {
    const Resolution r = resolve("name: x\narch: kimi-k3\nrules:\n  - match: '" + pattern + "'\n    scheme: keep\n", m);
    std::vector<std::string> out;
    for (const auto& d : r.decisions)
      if (d.rule_index == 0) out.push_back(d.module);
    return out;
  };
  auto all_end_with = [](const std::vector<std::string>& v, std::initializer_list<const char*> ends) {
    for (const auto& s : v) {
      bool ok = false;
      for (const char* e : ends) ok = ok || s.ends_with(e);
      if (!ok) return false;
    }
    return true;
  };
  // 3 MoE layers x 4 experts x 3 projections.
  auto experts = matched("@experts");
  EXPECT_EQ(experts.size(), 36u);
  auto shared = matched("@shared_experts");
  EXPECT_EQ(shared.size(), 9u);
  auto dense = matched("@dense_mlp");
  EXPECT_EQ(dense, (std::vector<std::string>{"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj",
                                             "model.layers.0.mlp.down_proj"}));
  // MLA layers 0, 2, 3: 5 projections each; linear-attention layer 1: q,k,v,f_a,f_b,b,o (no convs, no norms).
  auto attention = matched("@attention");
  EXPECT_EQ(attention.size(), 22u);
  for (const auto& a : attention) EXPECT_EQ(a.find("conv1d"), std::string::npos) << a;
  // Convs are protected: a template never quantizes them, but excluding works.
  EXPECT_TRUE(matched("@conv1d").empty());
  const Resolution ex = resolve("name: x\narch: kimi-k3\nexclude: ['@conv1d']\n", m);
  int convs = 0;
  for (const auto& d : ex.decisions) convs += d.rule_index == kRuleExcluded;
  EXPECT_EQ(convs, 3);
  EXPECT_TRUE(find(ex, "model.layers.1.self_attn.v_conv1d.weight").eligible);
  EXPECT_EQ(matched("@res_proj").size(), 4u);
  EXPECT_TRUE(all_end_with(matched("@res_proj"), {"self_attn.attn_res_proj"}));
  EXPECT_EQ(matched("@vision").size(), 4u);  // qkv, fc1, linear_1, linear_2 (patch conv is rank 4)
  // Protected tensors are never decided by templates.
  EXPECT_TRUE(matched("@router").empty());
  EXPECT_TRUE(matched("@heads").empty());
  // MTP: layer 3 (num_hidden_layers = 3): attention 5 + experts 12 + shared 3 + res_proj + eh_proj.
  auto mtp = matched("@mtp");
  EXPECT_EQ(mtp.size(), 22u);
  for (const auto& s : mtp) EXPECT_TRUE(s.starts_with("model.layers.3.")) << s;
  auto layer1 = matched("@layer:1");
  for (const auto& s : layer1) EXPECT_TRUE(s.starts_with("model.layers.1.")) << s;
  EXPECT_EQ(layer1.size(), 7u + 12u + 3u + 1u);
}

TEST(RecipeResolve, DenseMlpFollowsFirstKDenseReplace) {
  NameList m = testing::llama_names(4);
  // llama: every layer is dense.
  Resolution r = resolve("name: x\narch: llama\nrules:\n  - match: '@dense_mlp'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 12);
  // deepseek-v3: only layers below first_k_dense_replace.
  m.config["first_k_dense_replace"] = 3;
  r = resolve("name: x\narch: deepseek-v3\nrules:\n  - match: '@dense_mlp'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 9);
  m.config = nlohmann::json();  // no config: layer 0 only
  r = resolve("name: x\narch: deepseek-v3\nrules:\n  - match: '@dense_mlp'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 3);
  // Nested text_config (multimodal wrappers).
  m.config = {{"text_config", {{"first_k_dense_replace", 2}}}};
  r = resolve("name: x\narch: deepseek-v3\nrules:\n  - match: '@dense_mlp'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 6);
}

TEST(RecipeResolve, RegexIsFullMatch) {
  const NameList m = testing::llama_names();
  // `.*v_proj` must not hit... there is no qkv_proj in llama, so check that a
  // partial regex matches nothing at all.
  Resolution r = resolve("name: x\nrules:\n  - match: 're:model\\.layers\\.0'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_action(r, Action::Quantize), 0);
  EXPECT_HAS(all_warnings(r), "matches no tensor");
  r = resolve("name: x\nrules:\n  - match: 're:model\\.layers\\.0\\..*_proj'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_action(r, Action::Quantize), 7);
  // Tensor names match too.
  r = resolve("name: x\nrules:\n  - match: 're:.*\\.o_proj\\.weight'\n    scheme: fp8-channel\n", m);
  EXPECT_EQ(count_action(r, Action::Quantize), 2);
}

TEST(RecipeResolve, FusedGroupMismatchIsAnError) {
  const NameList m = testing::llama_names();
  std::string msg = resolve_error(
      "name: x\narch: llama\nrules:\n"
      "  - match: '*.q_proj'\n    scheme: mxfp4\n"
      "  - match: '@attention'\n    scheme: fp8-channel\n",
      m);
  EXPECT_HAS(msg, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_HAS(msg, "model.layers.0.self_attn.k_proj.weight");
  EXPECT_HAS(msg, "r.yaml:4:5");
  EXPECT_HAS(msg, "r.yaml:6:5");
  EXPECT_HAS(msg, "fused group");

  // One member quantized, another left BF16.
  msg = resolve_error("name: x\narch: llama\nexclude: ['*.up_proj']\nrules:\n  - match: '@mlp'\n    scheme: fp8-channel\n", m);
  EXPECT_HAS(msg, "mlp.gate_proj.weight");
  EXPECT_HAS(msg, "mlp.up_proj.weight");
  EXPECT_HAS(msg, "unquantized");
  EXPECT_HAS(msg, "exclude '*.up_proj'");

  // Same kind, different options is a mismatch too.
  msg = resolve_error(
      "name: x\narch: llama\nrules:\n"
      "  - match: '*.v_proj'\n    scheme: fp8-channel\n    options: {activations: fp8-per-token}\n"
      "  - match: '@attention'\n    scheme: fp8-channel\n",
      m);
  EXPECT_HAS(msg, "v_proj");

  // The experts of one layer form one group.
  const NameList k = testing::kimi_names();
  msg = resolve_error(
      "name: x\narch: kimi-k3\nrules:\n"
      "  - match: 'model.layers.2.mlp.experts.3.*'\n    scheme: fp8-channel\n"
      "  - match: '@experts'\n    scheme: mxfp4\n",
      k);
  EXPECT_HAS(msg, "model.layers.2.mlp.experts");
  EXPECT_HAS(msg, "experts.3.");

  // MLA q_a_proj + kv_a_proj_with_mqa are fused.
  msg = resolve_error("name: x\narch: kimi-k3\nrules:\n  - match: '*.q_a_proj'\n    scheme: fp8-channel\n", k);
  EXPECT_HAS(msg, "kv_a_proj_with_mqa");
}

TEST(RecipeResolve, Fp8KvCacheConstraintRejectsActivationQuantOfKvBAndOProj) {
  const NameList m = testing::dspark_names();
  const std::string rules =
      "rules:\n"
      "  - match: 'model.layers.*.self_attn.o_proj'\n    scheme: mxfp4\n    options: {activations: mxfp4-dynamic}\n";
  // Without the serving settings the same rules are fine.
  EXPECT_NO_THROW(resolve("name: x\narch: dspark\n" + rules, m));
  std::string msg = resolve_error(
      "name: x\narch: dspark\nserving: {kv_cache: fp8, prefill_query_quant: true}\n" + rules, m);
  EXPECT_HAS(msg, "r.yaml:5:5");
  EXPECT_HAS(msg, "model.layers.0.self_attn.o_proj.weight");
  EXPECT_HAS(msg, "FP8 activations");
  // One of the two settings alone does not trigger it.
  EXPECT_NO_THROW(resolve("name: x\narch: dspark\nserving: {kv_cache: fp8}\n" + rules, m));
  // Weight-only is allowed.
  EXPECT_NO_THROW(resolve(
      "name: x\narch: dspark\nserving: {kv_cache: fp8, prefill_query_quant: true}\nrules:\n"
      "  - match: ['*.o_proj', '*.kv_b_proj']\n    scheme: fp8-channel\n    options: {activations: none}\n",
      m));
  msg = resolve_error(
      "name: x\narch: dspark\nserving: {kv_cache: fp8, prefill_query_quant: true}\nrules:\n"
      "  - match: '*.kv_b_proj'\n    scheme: fp8-channel\n    options: {activations: fp8-per-token}\n",
      m);
  EXPECT_HAS(msg, "kv_b_proj");

  // Kimi: o_proj of a linear-attention layer is not fed by MLA.
  const NameList k = testing::kimi_names();
  EXPECT_NO_THROW(resolve(
      "name: x\narch: kimi-k3\nserving: {kv_cache: fp8, prefill_query_quant: true}\nrules:\n"
      "  - match: 'model.layers.1.self_attn.o_proj'\n    scheme: fp8-channel\n    options: {activations: fp8-per-token}\n",
      k));
  EXPECT_HAS(resolve_error("name: x\narch: kimi-k3\nserving: {kv_cache: fp8, prefill_query_quant: true}\nrules:\n"
                           "  - match: 'model.layers.2.self_attn.o_proj'\n    scheme: fp8-channel\n"
                           "    options: {activations: fp8-per-token}\n",
                           k),
             "model.layers.2.self_attn.o_proj");
}

TEST(RecipeResolve, WarnsForPatternsThatMatchNothing) {
  const NameList m = testing::llama_names();
  const Resolution r = resolve(
      "name: x\narch: llama\nexclude: ['*.nonexistent', '@heads']\nrules:\n"
      "  - match: ['*.o_proj', 'model.layers.9.*']\n    scheme: fp8-channel\n",
      m);
  const std::string w = all_warnings(r);
  EXPECT_HAS(w, "r.yaml:3:11: exclude pattern '*.nonexistent' matches no tensor");
  EXPECT_HAS(w, "r.yaml:5:25: pattern 'model.layers.9.*' matches no tensor");
  EXPECT_EQ(w.find("'@heads'"), std::string::npos) << w;
  EXPECT_EQ(w.find("'*.o_proj'"), std::string::npos) << w;
}

TEST(RecipeResolve, PreQuantizedTensorsPassThrough) {
  const NameList m = testing::kimi_names(/*nvfp4_experts=*/true);
  const Recipe recipe = load_recipe(std::string(SELQ_SOURCE_DIR) + "/recipes/kimi-k3-nvfp4-fp8attn-fp8se.yaml");
  const Resolution r = resolve_recipe(recipe, m.tensors, m.config);
  EXPECT_TRUE(r.warnings.empty()) << all_warnings(r);
  // 3 MoE layers x 4 experts x 3 projections x 4 tensors.
  EXPECT_EQ(count_action(r, Action::PassThrough), 144);
  const auto& e = find(r, "model.layers.2.mlp.experts.1.down_proj.weight_scale");
  EXPECT_EQ(e.action, Action::PassThrough);
  EXPECT_EQ(e.reason, "pre-quantized");
  // FP8: attention of MLA layers 0,2,3 (q_a, q_b, kv_a: 9) + linear-attention
  // layer 1 (q,k,v,f_a,f_b,b: 6) + shared experts (9) + dense layer 0 (3).
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 27);
  EXPECT_EQ(count_action(r, Action::Quantize), 27);
  for (const char* kept : {"model.layers.0.self_attn.kv_b_proj.weight", "model.layers.2.self_attn.o_proj.weight",
                           "model.layers.1.self_attn.o_proj.weight", "model.layers.2.mlp.gate.weight",
                           "model.layers.1.self_attn.q_conv1d.weight", "vision_tower.encoder.layers.0.attn.qkv.weight",
                           "model.layers.3.eh_proj.weight"})
    EXPECT_EQ(find(r, kept).action, Action::Keep) << kept;

  // A rule reaching for pre-quantized modules leaves them alone and says so.
  const Resolution r2 = resolve("name: x\narch: kimi-k3\nrules:\n  - match: '@experts'\n    scheme: mxfp4\n", m);
  EXPECT_EQ(count_action(r2, Action::PassThrough), 144);
  EXPECT_HAS(all_warnings(r2), "already quantized in the source");

  // An FP8 (block) source: the weight is F8 and its scale_inv passes with it.
  NameList f;
  f.linear("model.layers.0.self_attn.o_proj", 256, 256, DType::F8_E4M3);
  f.add("model.layers.0.self_attn.o_proj.weight_scale_inv", {2, 2}, DType::F32);
  f.linear("model.layers.0.mlp.down_proj", 256, 256);
  const Resolution r3 = resolve("name: x\ndefault: fp8-channel\n", f);
  EXPECT_EQ(r3.decisions[0].action, Action::PassThrough);
  EXPECT_EQ(r3.decisions[1].action, Action::PassThrough);
  EXPECT_EQ(r3.decisions[2].action, Action::Quantize);
  // The default asked for FP8 per channel: the pass-through is said, not silent.
  EXPECT_HAS(all_warnings(r3), "default asks for fp8-channel");
  EXPECT_HAS(all_warnings(r3), "model.layers.0.self_attn.o_proj");
}

TEST(RecipeResolve, EligibilityByRankAndDtype) {
  NameList m;
  m.linear("a.proj", 8, 8, DType::F32);
  m.linear("b.proj", 8, 8, DType::F16);
  m.add("c.experts_fused.weight", {4, 8, 8});
  m.add("d.vec.weight", {8});
  m.add("e.conv.weight", {8, 3, 3, 3});
  m.add("f.proj.bias", {8});
  m.linear("g.proj", 8, 8, DType::F64);
  const Resolution r = resolve("name: x\ndefault: fp8-channel\n", m);
  EXPECT_EQ(r.decisions[0].action, Action::Quantize);
  EXPECT_EQ(r.decisions[1].action, Action::Quantize);
  EXPECT_EQ(r.decisions[2].action, Action::Quantize);
  for (int i : {3, 4, 5, 6}) {
    EXPECT_EQ(r.decisions[i].action, Action::Keep) << r.decisions[i].tensor;
    EXPECT_EQ(r.decisions[i].rule_index, kRuleNotEligible);
    EXPECT_FALSE(r.decisions[i].eligible);
  }
  EXPECT_EQ(r.decisions[5].module, "f.proj.bias");
}

TEST(RecipeResolve, UnknownTemplateInAProgrammaticRecipe) {
  Recipe recipe;
  recipe.path = "mem";
  recipe.arch = "llama";
  recipe.exclude.push_back({"@vision", {"mem", 1, 1}});
  const NameList m = testing::llama_names();
  EXPECT_THROW(resolve_recipe(recipe, m.tensors, m.config), Error);
}

TEST(RecipeResolve, KimiSizedListResolves) {
  // 61 layers x 384 experts x 3 projections: the size `selq plan` faces. Its
  // time is measured in docs/BENCHMARKS.md (selq plan at 70k tensors), not asserted here.
  NameList m;
  m.config = {{"num_hidden_layers", 61}};
  for (int l = 0; l < 61; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* a : {"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"})
      m.linear(p + "self_attn." + a, 64, 64);
    for (int e = 0; e < 384; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
        m.linear(p + "mlp.experts." + std::to_string(e) + "." + proj, 64, 64);
  }
  const Recipe recipe = load_recipe(std::string(SELQ_SOURCE_DIR) + "/recipes/kimi-k3-mxfp4-attnfp8.yaml");
  const Resolution r = resolve_recipe(recipe, m.tensors, m.config);
  EXPECT_EQ(count_kinds(r)[SchemeKind::MXFP4], 61 * 384 * 3);
  EXPECT_EQ(count_kinds(r)[SchemeKind::FP8Channel], 61 * 5);
}

}  // namespace
}  // namespace selq::recipe
