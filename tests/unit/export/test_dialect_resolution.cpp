// For each dialect, selq's config for three model shapes must be read by
// every engine that reads that dialect exactly as decided, module by module.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include <fmt/format.h>

#include "core/error.h"
#include "export/engine_resolve.h"
#include "test_models.h"

namespace selq::exporter {
namespace {

using namespace selq::exporter::testing;
using nlohmann::json;

std::vector<std::string> names_of(const std::vector<ModuleDecision>& ms) {
  std::vector<std::string> out;
  for (const auto& m : ms) out.push_back(m.module);
  return out;
}

// Resolves every module with every engine (independently of the self-check
// inside build_quantization_config) and counts quantized/float agreements.
void expect_all_engines_agree(Dialect d, const std::vector<ModuleDecision>& ms, const json& qc) {
  auto all = names_of(ms);
  for (Engine e : engines_for(d)) {
    std::size_t quantized = 0;
    for (const auto& m : ms) {
      auto got = resolve_layer(e, qc, m.module, all);
      if (m.scheme) {
        ASSERT_TRUE(got.has_value()) << engine_name(e) << " leaves " << m.module << " in float";
        EXPECT_EQ(*got, scheme_config_json(d, *m.scheme)) << engine_name(e) << " " << m.module;
        ++quantized;
      } else {
        EXPECT_FALSE(got.has_value()) << engine_name(e) << " quantizes float " << m.module << " as "
                                      << got->dump();
      }
    }
    EXPECT_GT(quantized, 0u);
  }
}

struct Case {
  const char* model;
  Dialect dialect;
};

class Resolution : public ::testing::TestWithParam<Case> {};

std::vector<ModuleDecision> build_model(const Case& c) {
  std::string m = c.model;
  if (m == "dspark") return dspark_model(dspark_schemes(c.dialect));
  if (m == "llama") return llama_model(llama_schemes(c.dialect));
  return kimi_model(kimi_schemes(c.dialect));
}

TEST_P(Resolution, EveryEngineResolvesEveryModuleAsDecided) {
  ConfigInput in{build_model(GetParam()), nullptr};
  ConfigOutput out = build_quantization_config(GetParam().dialect, in);
  expect_all_engines_agree(GetParam().dialect, in.linear_modules, out.quantization_config);
  EXPECT_TRUE(check_config_resolution(GetParam().dialect, in, out.quantization_config).empty());
  if (GetParam().dialect == Dialect::ModelOpt) {
    // The legacy file must resolve identically.
    ASSERT_EQ(out.extra_files.size(), 1u);
    json hf = json::parse(out.extra_files[0].second);
    expect_all_engines_agree(Dialect::ModelOpt, in.linear_modules, hf);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, Resolution,
    ::testing::Values(Case{"dspark", Dialect::CompressedTensors}, Case{"dspark", Dialect::Quark},
                      Case{"dspark", Dialect::ModelOpt}, Case{"llama", Dialect::CompressedTensors},
                      Case{"llama", Dialect::Quark}, Case{"llama", Dialect::ModelOpt},
                      Case{"kimi", Dialect::CompressedTensors}, Case{"kimi", Dialect::Quark},
                      Case{"kimi", Dialect::ModelOpt}),
    [](const auto& info) {
      std::string n = std::string(info.param.model) + "_" + dialect_name(info.param.dialect);
      for (auto& c : n) if (c == '-') c = '_';
      return n;
    });

TEST(Resolution, SchemeObjectsDiscriminate) {
  // The equality checks above only mean something if distinct schemes give
  // distinct objects.
  std::vector<SchemeSpec> ct = {mxfp4_w4a4(), fp8_ptpc(), fp8_tensor_static(), fp8_block(), nvfp4_w4a4(),
                                nvfp4_w4a16(), int4_g128(), fp8_tensor_dynamic()};
  for (std::size_t i = 0; i < ct.size(); ++i)
    for (std::size_t j = i + 1; j < ct.size(); ++j)
      EXPECT_NE(scheme_config_json(Dialect::CompressedTensors, ct[i]),
                scheme_config_json(Dialect::CompressedTensors, ct[j]));
  EXPECT_NE(scheme_config_json(Dialect::Quark, fp8_ptpc()), scheme_config_json(Dialect::Quark, fp8_tensor_dynamic()));
  EXPECT_NE(scheme_config_json(Dialect::ModelOpt, nvfp4_w4a4()),
            scheme_config_json(Dialect::ModelOpt, nvfp4_w4a16()));
}

TEST(Resolution, MxFp4NotExpressibleInModelOpt) {
  ConfigInput in{dspark_model(dspark_schemes(Dialect::Quark)), nullptr};
  try {
    build_quantization_config(Dialect::ModelOpt, in);
    FAIL() << "expected Unsupported";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find("modelopt"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("mxfp4"), std::string::npos) << e.message();
  }
}

TEST(Resolution, FusedShardsWithDifferentSchemesAreRejected) {
  auto ms = llama_model(llama_schemes(Dialect::CompressedTensors));
  for (auto& m : ms) {
    if (m.module == "model.layers.2.self_attn.k_proj") m.scheme = fp8_block();
  }
  ConfigInput in{ms, nullptr};
  try {
    build_quantization_config(Dialect::CompressedTensors, in);
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.message().find("qkv_proj"), std::string::npos) << e.message();
  }
}

TEST(Resolution, ExpertsWithDifferentSchemesAreRejected) {
  auto ms = kimi_model(kimi_schemes(Dialect::Quark));
  for (auto& m : ms) {
    if (m.module == "model.layers.1.mlp.experts.5.down_proj") m.scheme = fp8_ptpc();
  }
  ConfigInput in{ms, nullptr};
  EXPECT_THROW(build_quantization_config(Dialect::Quark, in), Error);
}

}  // namespace
}  // namespace selq::exporter

namespace selq::exporter {
namespace {

using namespace selq::exporter::testing;

// Kimi-K2 expert count (384) over 8 layers. Building (which resolves every
// module with every engine) must stay fast and the CT targets compact.
// The full 61-layer model (70,639 modules) took 21 s (CT) / 29 s (Quark) before the resolvers indexed their config lists once; now ~1.4 s / 2.6 s (docs/BENCHMARKS.md).
TEST(Resolution, KimiK2ScaleBuildsQuickly) {
  std::vector<ModuleDecision> ms;
  for (int l = 0; l < 8; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                          "self_attn.kv_b_proj", "self_attn.o_proj"})
      ms.push_back({p + m, fp8_ptpc()});
    ms.push_back({p + "mlp.gate", std::nullopt});
    for (int e = 0; e < 384; ++e)
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        ms.push_back({p + "mlp.experts." + std::to_string(e) + "." + m, mxfp4_w4a4()});
  }
  ms.push_back({"lm_head", std::nullopt});
  ConfigInput in{ms, nullptr};
  for (Dialect d : {Dialect::CompressedTensors, Dialect::Quark}) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = build_quantization_config(d, in);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 30.0) << dialect_name(d);
    if (d == Dialect::CompressedTensors) {
      EXPECT_LT(out.quantization_config.dump().size(), 8000u);
    }
    std::printf("%s: %zu modules, built and self-checked in %.2f s, config %zu bytes\n", dialect_name(d).c_str(),
                ms.size(), s, out.quantization_config.dump().size());
  }
}

}  // namespace
}  // namespace selq::exporter
