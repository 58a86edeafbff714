// The resolvers reproduce the engines' documented quirks (docs/ENGINE_RULES.md §1-§5)
// on hand-written configs, including configs selq would never write.
#include <gtest/gtest.h>

#include "core/error.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "test_models.h"

namespace selq::exporter {
namespace {

using namespace selq::exporter::testing;
using nlohmann::json;

const std::vector<std::string> kLlama = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                         "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj",
                                         "model.layers.0.mlp.gate_proj",    "model.layers.0.mlp.up_proj",
                                         "model.layers.0.mlp.down_proj",    "lm_head"};

json ct_config(json targets, json ignore) {
  json g = scheme_config_json(Dialect::CompressedTensors, fp8_ptpc());
  g["targets"] = std::move(targets);
  return {{"quant_method", "compressed-tensors"}, {"format", "float-quantized"},
          {"config_groups", {{"group_0", g}}},    {"ignore", std::move(ignore)}};
}

TEST(EngineModules, FusedAndExperts) {
  std::vector<std::string> ms = {"a.self_attn.q_a_proj", "a.self_attn.kv_a_proj_with_mqa",
                                 "b.self_attn.kv_a_proj_with_mqa", "a.mlp.experts.1.up_proj",
                                 "a.mlp.experts.0.up_proj"};
  auto v = engine_modules(EngineFamily::Vllm, ms);
  ASSERT_EQ(v.size(), 3u);
  EXPECT_EQ(v[0].name, "a.self_attn.fused_qkv_a_proj");
  EXPECT_EQ(v[1].name, "b.self_attn.kv_a_proj_with_mqa");  // no q_lora: stays unfused
  EXPECT_EQ(v[2].name, "a.mlp.experts");
  EXPECT_EQ(v[2].members.front(), "a.mlp.experts.0.up_proj");
  EXPECT_EQ(engine_modules(EngineFamily::Sglang, ms)[0].name, "a.self_attn.fused_qkv_a_proj_with_mqa");
  EXPECT_EQ(experts_parent("x.mlp.experts.12.w1"), "x.mlp.experts");
  EXPECT_FALSE(experts_parent("x.mlp.shared_experts.up_proj").has_value());
}

TEST(VllmCt, RegexWithoutDollarOverMatchesFusedName) {
  // `re:.*v_proj` also matches `qkv_proj` itself (§5 hazards).
  json qc = ct_config({"re:.*v_proj"}, json::array());
  EXPECT_TRUE(resolve_layer(Engine::VllmCompressedTensors, qc, "model.layers.0.self_attn.q_proj", kLlama));
  json anchored = ct_config({"re:.*\\.v_proj$"}, json::array());
  EXPECT_FALSE(resolve_layer(Engine::VllmCompressedTensors, anchored, "model.layers.0.self_attn.q_proj", kLlama));
}

TEST(VllmCt, UnmatchedIsSilentlyFloatButSglangRaises) {
  json qc = ct_config({"model.layers.0.self_attn.o_proj"}, json::array());
  EXPECT_FALSE(resolve_layer(Engine::VllmCompressedTensors, qc, "model.layers.0.mlp.down_proj", kLlama));
  EXPECT_THROW(resolve_layer(Engine::SglangCompressedTensors, qc, "model.layers.0.mlp.down_proj", kLlama), Error);
}

TEST(VllmCt, PartlyIgnoredFusedLayerRaises) {
  json qc = ct_config({"Linear"}, {"model.layers.0.self_attn.k_proj"});
  EXPECT_THROW(resolve_layer(Engine::VllmCompressedTensors, qc, "model.layers.0.self_attn.q_proj", kLlama), Error);
  // Class target "Linear" catches RowParallelLinear but not ParallelLMHead.
  EXPECT_TRUE(resolve_layer(Engine::VllmCompressedTensors, qc, "model.layers.0.self_attn.o_proj", kLlama));
  EXPECT_FALSE(resolve_layer(Engine::VllmCompressedTensors, qc, "lm_head", kLlama));
}

TEST(VllmCt, ExpertZeroOnly) {
  std::vector<std::string> ms;
  for (int e = 0; e < 4; ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"})
      ms.push_back("m.mlp.experts." + std::to_string(e) + "." + p);
  json qc = ct_config({"re:m\\.mlp\\.experts\\.0\\..*$"}, json::array());
  // Experts 1-3 are not targeted, yet all load as quantized: only 0 is probed.
  EXPECT_TRUE(resolve_layer(Engine::VllmCompressedTensors, qc, "m.mlp.experts.3.up_proj", ms));
  json partial = ct_config({"m.mlp.experts.0.gate_proj", "m.mlp.experts.0.up_proj"}, json::array());
  EXPECT_THROW(resolve_layer(Engine::VllmCompressedTensors, partial, "m.mlp.experts", ms), Error);
}

TEST(Quark, PerExpertKeysVllmVsSglang) {
  // sglang#38998-like: per-expert keys are found by vLLM's substring rule but
  // not by SGLang's whole-name fnmatch, which falls back to global.
  std::vector<std::string> ms = {"m.mlp.experts.0.up_proj", "m.mlp.experts.1.up_proj"};
  json over = scheme_config_json(Dialect::Quark, mxfp4_w4a4());
  json global = scheme_config_json(Dialect::Quark, fp8_ptpc());
  json qc = {{"global_quant_config", global},
             {"layer_quant_config", {{"m.mlp.experts.0.up_proj", over}, {"m.mlp.experts.1.up_proj", over}}},
             {"exclude", json::array()}};
  EXPECT_EQ(resolve_layer(Engine::VllmQuark, qc, "m.mlp.experts", ms), over);
  EXPECT_EQ(resolve_layer(Engine::SglangQuark, qc, "m.mlp.experts", ms), global);
}

TEST(Quark, ExcludeRules) {
  json global = scheme_config_json(Dialect::Quark, fp8_ptpc());
  json qc = {{"global_quant_config", global}, {"layer_quant_config", json::object()},
             {"exclude", {"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.*.o_proj"}}};
  EXPECT_FALSE(resolve_layer(Engine::VllmQuark, qc, "model.layers.0.mlp.up_proj", kLlama));
  EXPECT_FALSE(resolve_layer(Engine::AtomQuark, qc, "model.layers.0.mlp.gate_up_proj", kLlama));
  // Globs are not honored by vLLM's exclude, but are by ATOM's.
  EXPECT_TRUE(resolve_layer(Engine::VllmQuark, qc, "model.layers.0.self_attn.o_proj", kLlama));
  EXPECT_FALSE(resolve_layer(Engine::AtomQuark, qc, "model.layers.0.self_attn.o_proj", kLlama));
  json partial = qc;
  partial["exclude"] = {"model.layers.0.mlp.gate_proj"};
  EXPECT_THROW(resolve_layer(Engine::VllmQuark, partial, "model.layers.0.mlp.up_proj", kLlama), Error);
}

TEST(ModelOpt, SubstringExclusion) {
  std::vector<std::string> ms;
  for (int l : {1, 10, 11}) ms.push_back("model.layers." + std::to_string(l) + ".mlp.down_proj");
  json qc = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}, {"ignore", {"model.layers.1"}}};
  for (const auto& m : ms) EXPECT_FALSE(resolve_layer(Engine::VllmModelOpt, qc, m, ms)) << m;
  qc["ignore"] = {"model.layers.1.mlp.down_proj"};
  EXPECT_FALSE(resolve_layer(Engine::VllmModelOpt, qc, ms[0], ms));
  EXPECT_TRUE(resolve_layer(Engine::VllmModelOpt, qc, ms[1], ms));
  EXPECT_EQ(*resolve_layer(Engine::VllmModelOpt, qc, ms[2], ms), json({{"quant_algo", "FP8"}}));
}

TEST(ModelOpt, MixedFirstKeyUnderPrefix) {
  std::vector<std::string> ms = {"m.mlp.experts.0.up_proj", "m.mlp.experts.1.up_proj"};
  json qc = {{"quant_method", "modelopt"}, {"quant_algo", "MIXED_PRECISION"}, {"ignore", json::array()},
             {"quantized_layers", {{"m.mlp.experts.0.up_proj", {{"quant_algo", "nvfp4"}, {"group_size", 16}}}}}};
  EXPECT_EQ(*resolve_layer(Engine::VllmModelOpt, qc, "m.mlp.experts", ms),
            scheme_config_json(Dialect::ModelOpt, nvfp4_w4a4()));
}

}  // namespace
}  // namespace selq::exporter
