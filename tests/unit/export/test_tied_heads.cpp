// Heads with no stored weight (a tied lm_head, an MTP layer's shared head)
// and INT weight-only formats: what vLLM builds and loads (docs/ENGINE_RULES.md "Tied
// heads", "INT weight-only"), and the self-check refusing the configs it
// cannot load.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "test_models.h"

namespace selq::exporter {
namespace {

using nlohmann::json;
using namespace testing;

bool lists(const json& a, const std::string& s) {
  return a.is_array() && std::find(a.begin(), a.end(), json(s)) != a.end();
}

TEST(UnstoredHeads, TiedLmHeadAndSharedMtpHead) {
  EXPECT_EQ(unstored_head_modules({"model.embed_tokens.weight", "model.layers.0.mlp.down_proj.weight"}),
            std::vector<std::string>{"lm_head"});
  EXPECT_TRUE(unstored_head_modules({"model.embed_tokens.weight", "lm_head.weight"}).empty());
  EXPECT_TRUE(unstored_head_modules({"model.layers.0.mlp.down_proj.weight"}).empty());  // no embedding, no head
  // An MTP layer (it has eh_proj) without a head of its own shares the model's.
  EXPECT_EQ(unstored_head_modules({"model.embed_tokens.weight", "lm_head.weight", "model.layers.4.eh_proj.weight",
                                   "model.layers.5.eh_proj.weight", "model.layers.5.shared_head.head.weight"}),
            std::vector<std::string>{"model.layers.4.shared_head.head"});
}

ConfigInput tied_llama(Dialect d) {
  ConfigInput in{llama_model(llama_schemes(d)), nullptr};
  // llama_model lists lm_head as a float module; a tied model has no such weight.
  std::erase_if(in.linear_modules, [](const ModuleDecision& m) { return m.module == "lm_head"; });
  in.unstored_heads = {"lm_head"};
  return in;
}

TEST(UnstoredHeads, ModelOptExcludesATiedHead) {
  for (auto scheme : {fp8_ptpc(), nvfp4_w4a16(), nvfp4_w4a4()}) {
    ConfigInput in = tied_llama(Dialect::ModelOpt);
    for (auto& m : in.linear_modules)
      if (m.scheme) m.scheme = adapt_scheme_for_dialect(Dialect::ModelOpt, scheme, DType::BF16);
    ConfigOutput out = build_quantization_config(Dialect::ModelOpt, in);
    EXPECT_TRUE(lists(out.quantization_config["ignore"], "lm_head")) << out.quantization_config.dump();
    const json hf = json::parse(out.extra_files.at(0).second);
    EXPECT_TRUE(lists(hf["quantization"]["exclude_modules"], "lm_head")) << hf.dump();
    EXPECT_EQ(check_config_resolution(Dialect::ModelOpt, in, out.quantization_config), std::vector<std::string>{});
    EXPECT_EQ(check_config_resolution(Dialect::ModelOpt, in, hf), std::vector<std::string>{});

    // The config selq wrote before: the head not excluded. vLLM builds it
    // quantized and finds no scales; the self-check must refuse it.
    ConfigInput old = in;
    old.unstored_heads.clear();
    const json old_qc = build_quantization_config(Dialect::ModelOpt, old).quantization_config;
    EXPECT_FALSE(lists(old_qc["ignore"], "lm_head"));
    const auto problems = check_config_resolution(Dialect::ModelOpt, in, old_qc);
    ASSERT_EQ(problems.size(), 1u) << old_qc.dump();
    EXPECT_NE(problems[0].find("lm_head has no stored weight"), std::string::npos) << problems[0];
  }
}

// compressed-tensors and Quark configs never quantize vLLM's ParallelLMHead
// (their targets/exclusions reach LinearBase layers only): a tied head needs
// no entry, and adding one would be a dead entry.
TEST(UnstoredHeads, CompressedTensorsAndQuarkNeedNoEntry) {
  for (Dialect d : {Dialect::CompressedTensors, Dialect::Quark}) {
    ConfigInput in = tied_llama(d);
    ConfigOutput out = build_quantization_config(d, in);
    ConfigInput untied_view = in;
    untied_view.unstored_heads.clear();
    EXPECT_EQ(out.quantization_config, build_quantization_config(d, untied_view).quantization_config)
        << dialect_name(d);
    EXPECT_EQ(check_config_resolution(d, in, out.quantization_config), std::vector<std::string>{}) << dialect_name(d);
    EXPECT_FALSE(out.quantization_config.dump().find("\"lm_head\"") != std::string::npos) << dialect_name(d);
  }
}

TEST(IntWeightOnly, CompressedTensorsWritesPackQuantizedForInt4AndInt8) {
  for (int bits : {4, 8}) {
    auto s = int4_g128();
    s.bits = bits;
    for (bool channel : {false, true}) {
      auto spec = s;
      if (channel) {
        spec.kind = quant::SchemeKind::IntChannel;
        spec.group_size = 0;
      }
      spec = adapt_scheme_for_dialect(Dialect::CompressedTensors, spec, DType::BF16);
      ConfigInput in{{{"model.layers.0.mlp.down_proj", spec, false}, {"lm_head", std::nullopt, false}}, nullptr};
      const json qc = build_quantization_config(Dialect::CompressedTensors, in).quantization_config;
      EXPECT_EQ(qc["format"], "pack-quantized") << qc.dump();
      EXPECT_EQ(check_config_resolution(Dialect::CompressedTensors, in, qc), std::vector<std::string>{}) << qc.dump();
      EXPECT_EQ(output_tensor_name(Dialect::CompressedTensors, spec, quant::OutRole::Weight, "m"), "m.weight_packed");
    }
  }
}

// What selq wrote before for int8 weight-only: format int-quantized, which
// vLLM's scheme picker rejects (it takes int-quantized only for W8A8).
TEST(IntWeightOnly, VllmRefusesIntQuantizedWeightOnly) {
  auto spec = adapt_scheme_for_dialect(Dialect::CompressedTensors, int4_g128(), DType::BF16);
  spec.bits = 8;
  ConfigInput in{{{"model.layers.0.mlp.down_proj", spec, false}}, nullptr};
  json qc = build_quantization_config(Dialect::CompressedTensors, in).quantization_config;
  for (auto& [name, g] : qc["config_groups"].items()) g["format"] = "int-quantized";
  qc["format"] = "int-quantized";
  const std::vector<std::string> all{"model.layers.0.mlp.down_proj"};
  try {
    resolve_layer(Engine::VllmCompressedTensors, qc, all[0], all);
    FAIL() << "vLLM would not load this";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pack-quantized"), std::string::npos) << e.what();
  }
  const auto problems = check_config_resolution(Dialect::CompressedTensors, in, qc);
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("vllm"), std::string::npos) << problems[0];
}

}  // namespace
}  // namespace selq::exporter
