// Reading a dialect back must invert its writers exactly, or verify would
// report every module of a clean checkpoint and the runtime would refuse it.
#include <gtest/gtest.h>

#include "core/error.h"
#include "export/dialect_read.h"

namespace selq::exporter {
namespace {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

std::vector<SchemeSpec> sample_specs() {
  std::vector<SchemeSpec> v;
  auto add = [&](SchemeKind k, ActMode a, int bits = 8, bool sym = true, int group = 0) {
    SchemeSpec s;
    s.kind = k;
    s.act = a;
    s.bits = bits;
    s.symmetric = sym;
    s.group_size = group;
    v.push_back(s);
  };
  add(SchemeKind::MXFP4, ActMode::None);
  add(SchemeKind::MXFP4, ActMode::MXFP4Dynamic);
  add(SchemeKind::MXFP8, ActMode::MXFP8Dynamic);
  add(SchemeKind::NVFP4, ActMode::None);
  add(SchemeKind::NVFP4, ActMode::NVFP4);
  add(SchemeKind::FP8Tensor, ActMode::FP8StaticTensor);
  add(SchemeKind::FP8Channel, ActMode::FP8PerToken);
  add(SchemeKind::FP8Block, ActMode::FP8PerTokenGroup128);
  add(SchemeKind::IntChannel, ActMode::None, 8);
  add(SchemeKind::IntGroup, ActMode::None, 4, true, 128);
  add(SchemeKind::IntGroup, ActMode::None, 4, false, 32);
  return v;
}

TEST(DialectRead, ConfigJsonRoundTripsInEveryDialect) {
  int checked = 0;
  for (auto d : {Dialect::CompressedTensors, Dialect::Quark, Dialect::ModelOpt}) {
    for (auto model : {DType::BF16, DType::F16}) {
      for (const auto& base : sample_specs()) {
        SchemeSpec s;
        try {
          check_dialect_supports(d, base);
          s = adapt_scheme_for_dialect(d, base, model);
        } catch (const Error&) {
          continue;
        }
        auto j = scheme_config_json(d, s);
        auto back = scheme_from_config_json(d, j, model);
        ASSERT_TRUE(back) << dialect_name(d) << " " << s.name() << " " << j.dump();
        // Same config object and same stored tensors; the scale rounding rule
        // is not recorded in configs, so only the tensor layout must agree.
        EXPECT_EQ(scheme_config_json(d, *back), j);
        EXPECT_EQ(back->kind, s.kind);
        EXPECT_EQ(back->act, s.act);
        auto a = quant::scheme_outputs(s, {64, 256});
        auto b = quant::scheme_outputs(*back, {64, 256});
        ASSERT_EQ(a.size(), b.size());
        for (std::size_t i = 0; i < a.size(); ++i) {
          EXPECT_EQ(a[i].dtype, b[i].dtype);
          EXPECT_EQ(a[i].shape, b[i].shape);
        }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 20);
}

TEST(DialectRead, UnknownConfigObjectIsNotGuessed) {
  nlohmann::json j = {{"weights", {{"num_bits", 3}, {"type", "float"}}}};
  EXPECT_FALSE(scheme_from_config_json(Dialect::CompressedTensors, j, DType::BF16));
  EXPECT_FALSE(scheme_from_name(Dialect::Quark, "fp3-made-up", DType::BF16));
}

// llm-compressor's GPTQ records its column order: "static"/"weight" store
// nothing more (read as the scheme without it), "group" stores a g_idx (not read).
TEST(DialectRead, GptqActorderThatStoresNothingIsTheSameScheme) {
  const nlohmann::json nvfp4 = nlohmann::json::parse(R"({"format": "nvfp4-pack-quantized", "input_activations": null,
      "output_activations": null, "weights": {"actorder": "static", "block_structure": null, "dynamic": false,
      "group_size": 16, "num_bits": 4, "observer": "memoryless_minmax", "observer_kwargs": {},
      "scale_dtype": "torch.float8_e4m3fn", "strategy": "tensor_group", "symmetric": true, "type": "float",
      "zp_dtype": null}})");
  const auto plain = [&](const char* actorder) {
    nlohmann::json j = nvfp4;
    j["weights"]["actorder"] = actorder ? nlohmann::json(actorder) : nlohmann::json();
    return scheme_from_config_json(Dialect::CompressedTensors, j, DType::BF16);
  };
  ASSERT_TRUE(plain(nullptr));
  for (const char* same : {"static", "weight"}) {
    ASSERT_TRUE(plain(same)) << same;
    EXPECT_EQ(plain(same)->name(), plain(nullptr)->name());
  }
  for (const char* stored : {"group", "dynamic"}) EXPECT_FALSE(plain(stored)) << stored;
}

TEST(DialectRead, ManifestNamesResolve) {
  for (const char* n : {"mxfp4", "fp8-channel", "int4-g128"}) {
    auto s = scheme_from_name(Dialect::CompressedTensors, n, DType::BF16);
    ASSERT_TRUE(s) << n;
    EXPECT_EQ(s->name(), n);
  }
  auto m = scheme_from_name(Dialect::ModelOpt, "nvfp4-modelopt", DType::BF16);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->nvfp, quant::NvfpConvention::ModelOpt);
}

TEST(DialectRead, DetectsTheDialectOfAConfig) {
  EXPECT_EQ(dialect_of_config({{"quant_method", "compressed-tensors"}}), Dialect::CompressedTensors);
  EXPECT_EQ(dialect_of_config({{"quant_method", "quark"}}), Dialect::Quark);
  EXPECT_EQ(dialect_of_config({{"quant_method", "modelopt"}}), Dialect::ModelOpt);
  // hf_quant_config.json has no quant_method, only its own keys.
  EXPECT_EQ(dialect_of_config({{"quantization", {{"quant_algo", "FP8"}}}}), Dialect::ModelOpt);
  EXPECT_FALSE(dialect_of_config({{"quant_method", "gptq"}}));
  EXPECT_FALSE(dialect_of_config(nlohmann::json()));
}

TEST(DialectRead, ListsTheEntriesThatNameModules) {
  const nlohmann::json ct = {{"ignore", {"lm_head"}},
                             {"config_groups", {{"group_0", {{"targets", {"Linear", "re:.*o_proj$"}}}}}}};
  auto e = config_module_entries(Dialect::CompressedTensors, ct);
  ASSERT_EQ(e.size(), 2u);  // "Linear" is a class name, not a module
  EXPECT_EQ(e[0].where, "ignore");
  EXPECT_EQ(e[1].where, "config_groups.group_0.targets");
  EXPECT_EQ(e[1].pattern, "re:.*o_proj$");
  const nlohmann::json quark = {{"exclude", {"lm_head"}}, {"layer_quant_config", {{"*self_attn*", nullptr}}}};
  e = config_module_entries(Dialect::Quark, quark);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].pattern, "*self_attn*");
  const nlohmann::json mo = {{"quantization", {{"exclude_modules", {"lm_head", "*mlp.gate"}}}}};
  e = config_module_entries(Dialect::ModelOpt, mo);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].where, "exclude_modules");
  // Loose configs in the wild: null or wrongly typed nodes name nothing.
  EXPECT_TRUE(config_module_entries(Dialect::Quark, {{"exclude", nullptr}, {"layer_quant_config", 3}}).empty());
}

TEST(DialectRead, UnknownModelDtypeTriesEachFloat) {
  SchemeSpec s;
  s.kind = SchemeKind::FP8Channel;
  s.act = ActMode::FP8PerToken;
  for (DType model : {DType::BF16, DType::F16, DType::F32}) {
    const auto adapted = adapt_scheme_for_dialect(Dialect::CompressedTensors, s, model);
    auto back = scheme_from_config_json_any_dtype(Dialect::CompressedTensors,
                                                 scheme_config_json(Dialect::CompressedTensors, adapted));
    ASSERT_TRUE(back) << dtype_name(model);
    // The config does not record the scale dtype (the runtime reads it from the stored scale).
    EXPECT_EQ(scheme_config_json(Dialect::CompressedTensors, *back),
              scheme_config_json(Dialect::CompressedTensors, adapted));
    EXPECT_EQ(back->kind, s.kind);
    EXPECT_EQ(back->act, s.act);
  }
}

}  // namespace
}  // namespace selq::exporter

namespace selq::exporter {
namespace {

// Configs as the projects publish them (field for field), read by what they mean.
TEST(PublishedConfigs, KimiK2ThinkingInt4GroupOf32) {
  // moonshotai/Kimi-K2-Thinking config.json quantization_config (compressed-tensors, pack-quantized).
  const nlohmann::json qc = nlohmann::json::parse(R"({
    "config_groups": {"group_0": {"input_activations": null, "output_activations": null, "targets": ["Linear"],
      "weights": {"actorder": null, "block_structure": null, "dynamic": false, "group_size": 32, "num_bits": 4,
                  "observer": "minmax", "observer_kwargs": {}, "strategy": "group", "symmetric": true,
                  "type": "int"}}},
    "format": "pack-quantized", "ignore": ["lm_head", "re:.*self_attn.*", "re:.*shared_experts.*",
                                           "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"],
    "kv_cache_scheme": null, "quant_method": "compressed-tensors", "quantization_status": "compressed"})");
  const std::vector<std::string> modules = {"model.layers.1.mlp.experts.0.up_proj",
                                            "model.layers.1.self_attn.o_proj", "model.layers.0.mlp.down_proj"};
  EngineResolver r(vllm_engine_for(Dialect::CompressedTensors), qc, modules);
  const auto& expert = r.resolve(modules[0]);
  ASSERT_TRUE(expert);
  const auto s = scheme_from_config_json(Dialect::CompressedTensors, *expert, DType::BF16);
  ASSERT_TRUE(s) << expert->dump();
  EXPECT_EQ(s->name(), "int4-g32");
  EXPECT_FALSE(r.resolve(modules[1]));  // ignored by regex
  EXPECT_FALSE(r.resolve(modules[2]));
  EXPECT_TRUE(unimplemented_numerics(Dialect::CompressedTensors, qc).empty());
}

TEST(PublishedConfigs, Quark013SpecFieldsThatDoNotChangeTheNumerics) {
  // AMD Quark 0.13's MXFP4 weight spec as direct_quantize_checkpoint writes it.
  const nlohmann::json spec = nlohmann::json::parse(R"({"dtype": "fp4", "is_dynamic": false, "qscheme": "per_group",
    "ch_axis": -1, "group_size": 32, "block_size": null, "symmetric": null, "round_method": "half_even",
    "scale_type": "float", "zero_point_type": "int32", "scale_format": "e8m0", "scale_calculation_mode": "even",
    "mx_element_dtype": null, "observer_cls": "PerBlockMXObserver", "is_scale_quant": false,
    "enable_buffer_reuse": false, "max_input_numel": 4194304})");
  nlohmann::json layer = {{"weight", spec}, {"input_tensors", nullptr}, {"output_tensors", nullptr},
                          {"bias", nullptr}, {"target_device", nullptr}};
  auto s = scheme_from_config_json(Dialect::Quark, layer, DType::BF16);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name(), "mxfp4");
  // A field that does change them still has to match: another scale rule is another scheme.
  layer["weight"]["scale_calculation_mode"] = "floor";
  s = scheme_from_config_json(Dialect::Quark, layer, DType::BF16);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->scale_rule, ScaleRule::Floor);
  layer["weight"]["dtype"] = "int3";
  EXPECT_FALSE(scheme_from_config_json(Dialect::Quark, layer, DType::BF16));
  // Output quantization and a quantized softmax are named, not computed otherwise.
  const nlohmann::json qc = {{"quant_method", "quark"},
                             {"global_quant_config", {{"weight", spec}, {"output_tensors", spec}}},
                             {"softmax_quant_spec", spec},
                             {"kv_cache_quant_config", nlohmann::json::object()}};
  const auto what = unimplemented_numerics(Dialect::Quark, qc);
  ASSERT_EQ(what.size(), 2u);
  EXPECT_NE(what[0].find("softmax_quant_spec"), std::string::npos);
  EXPECT_NE(what[1].find("global_quant_config.output_tensors"), std::string::npos);
}

}  // namespace
}  // namespace selq::exporter
