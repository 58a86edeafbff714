// Dialect tables: names, which schemes each dialect can express, the
// scheme options each prescribes, tensor names and config shapes.
#include <gtest/gtest.h>

#include "core/error.h"
#include "export/engine_resolve.h"
#include "test_models.h"

namespace selq::exporter {
namespace {

using namespace selq::exporter::testing;
using nlohmann::json;
using quant::OutRole;

TEST(Dialect, NamesRoundTrip) {
  for (Dialect d : {Dialect::CompressedTensors, Dialect::Quark, Dialect::ModelOpt})
    EXPECT_EQ(dialect_from_name(dialect_name(d)), d);
  EXPECT_EQ(dialect_name(Dialect::CompressedTensors), "compressed-tensors");
  EXPECT_FALSE(dialect_from_name("gguf").has_value());
}

// The names are kDialectNames, the one list (a recipe's dialect: is checked against it by the plan).
TEST(Dialect, NamesAreTheRecipeList) {
  for (std::size_t i = 0; i < kAllDialects.size(); ++i) {
    EXPECT_EQ(dialect_name(kAllDialects[i]), kDialectNames[i]);
    EXPECT_EQ(parse_dialect(kDialectNames[i]), kAllDialects[i]);
  }
  try {
    parse_dialect("gguf");
    ADD_FAILURE() << "gguf parsed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(e.message().find("unknown dialect 'gguf' (expected one of: compressed-tensors, quark, modelopt)"), std::string::npos)
        << e.message();
  }
}

bool supports(Dialect d, const SchemeSpec& s) {
  try {
    check_dialect_supports(d, s);
    return true;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(e.message().find(dialect_name(d)), std::string::npos) << e.message();
    return false;
  }
}

TEST(Dialect, SupportMatrix) {
  using D = Dialect;
  auto mx_wo = make(SchemeKind::MXFP4, ActMode::None);
  auto fp8_ch_wo = make(SchemeKind::FP8Channel, ActMode::None);
  auto int8 = make(SchemeKind::IntChannel, ActMode::None);
  auto nvfp4_fp8 = make(SchemeKind::NVFP4, ActMode::FP8PerToken);
  // compressed-tensors
  for (const auto& s : {mxfp4_w4a4(), mx_wo, fp8_ptpc(), fp8_tensor_static(), fp8_block(), nvfp4_w4a4(),
                        nvfp4_w4a16(), mxfp8(), int4_g128(), int8, fp8_ch_wo})
    EXPECT_TRUE(supports(D::CompressedTensors, s)) << scheme_label(s);
  EXPECT_FALSE(supports(D::CompressedTensors, nvfp4_fp8));
  EXPECT_FALSE(supports(D::CompressedTensors, make(SchemeKind::FP8Block, ActMode::FP8PerToken)));
  // quark
  for (const auto& s : {mxfp4_w4a4(), mx_wo, fp8_ptpc(), fp8_tensor_static(), fp8_tensor_dynamic(), fp8_block(),
                        nvfp4_w4a4()})
    EXPECT_TRUE(supports(D::Quark, s)) << scheme_label(s);
  for (const auto& s : {nvfp4_w4a16(), mxfp8(), int4_g128(), int8, fp8_ch_wo})
    EXPECT_FALSE(supports(D::Quark, s)) << scheme_label(s);
  // modelopt
  for (const auto& s : {fp8_ptpc(), fp8_tensor_static(), fp8_block(), nvfp4_w4a4(), nvfp4_w4a16(), mxfp8()})
    EXPECT_TRUE(supports(D::ModelOpt, s)) << scheme_label(s);
  for (const auto& s : {mxfp4_w4a4(), mx_wo, int4_g128(), fp8_tensor_dynamic(), fp8_ch_wo})
    EXPECT_FALSE(supports(D::ModelOpt, s)) << scheme_label(s);
}

TEST(Dialect, AdaptPrescribesScaleConventions) {
  auto ct = adapt_scheme_for_dialect(Dialect::CompressedTensors, fp8_ptpc(), DType::BF16);
  EXPECT_EQ(ct.scale_dtype, DType::BF16);
  EXPECT_TRUE(ct.scale_keepdim);
  auto q = adapt_scheme_for_dialect(Dialect::Quark, fp8_ptpc(), DType::BF16);
  EXPECT_EQ(q.scale_dtype, DType::F32);
  EXPECT_FALSE(q.scale_keepdim);
  auto mo = adapt_scheme_for_dialect(Dialect::ModelOpt, fp8_ptpc(), DType::F16);
  EXPECT_EQ(mo.scale_dtype, DType::F32);
  EXPECT_FALSE(mo.scale_keepdim);
  EXPECT_EQ(adapt_scheme_for_dialect(Dialect::CompressedTensors, nvfp4_w4a4(), DType::BF16).nvfp,
            quant::NvfpConvention::CompressedTensors);
  EXPECT_EQ(adapt_scheme_for_dialect(Dialect::ModelOpt, nvfp4_w4a4(), DType::BF16).nvfp,
            quant::NvfpConvention::ModelOpt);
  // vLLM's QuarkNVFP4 multiplies weight_scale_2 in, like ModelOpt.
  EXPECT_EQ(adapt_scheme_for_dialect(Dialect::Quark, nvfp4_w4a4(), DType::BF16).nvfp,
            quant::NvfpConvention::ModelOpt);
  EXPECT_TRUE(adapt_scheme_for_dialect(Dialect::CompressedTensors, int4_g128(), DType::BF16).int_pack_int32);
  auto int8 = int4_g128();
  int8.bits = 8;
  // Weight-only int8 too: vLLM loads W8A16 only as pack-quantized (CompressedTensorsWNA16).
  const auto int8_ct = adapt_scheme_for_dialect(Dialect::CompressedTensors, int8, DType::BF16);
  EXPECT_TRUE(int8_ct.int_pack_int32);
  EXPECT_EQ(scheme_config_json(Dialect::CompressedTensors, int8_ct)["format"], "pack-quantized");
}

TEST(Dialect, TensorNames) {
  const std::string m = "model.layers.0.self_attn.o_proj";
  auto name = [&](Dialect d, const SchemeSpec& s, OutRole r) { return output_tensor_name(d, s, r, m); };
  using D = Dialect;
  EXPECT_EQ(name(D::CompressedTensors, nvfp4_w4a4(), OutRole::Weight), m + ".weight_packed");
  EXPECT_EQ(name(D::CompressedTensors, nvfp4_w4a4(), OutRole::GlobalScale), m + ".weight_global_scale");
  EXPECT_EQ(name(D::CompressedTensors, mxfp4_w4a4(), OutRole::Weight), m + ".weight_packed");
  EXPECT_EQ(name(D::CompressedTensors, fp8_ptpc(), OutRole::Weight), m + ".weight");
  EXPECT_EQ(name(D::CompressedTensors, mxfp8(), OutRole::Weight), m + ".weight");
  auto packed = adapt_scheme_for_dialect(D::CompressedTensors, int4_g128(), DType::BF16);
  EXPECT_EQ(name(D::CompressedTensors, packed, OutRole::Weight), m + ".weight_packed");
  EXPECT_EQ(name(D::CompressedTensors, packed, OutRole::WeightShape), m + ".weight_shape");
  EXPECT_EQ(name(D::CompressedTensors, packed, OutRole::ZeroPoint), m + ".weight_zero_point");
  EXPECT_EQ(name(D::Quark, mxfp4_w4a4(), OutRole::Weight), m + ".weight");
  EXPECT_EQ(name(D::Quark, mxfp4_w4a4(), OutRole::Scale), m + ".weight_scale");
  EXPECT_EQ(name(D::Quark, nvfp4_w4a4(), OutRole::GlobalScale), m + ".weight_scale_2");
  EXPECT_EQ(name(D::Quark, fp8_block(), OutRole::Scale), m + ".weight_scale");
  EXPECT_EQ(name(D::ModelOpt, nvfp4_w4a4(), OutRole::GlobalScale), m + ".weight_scale_2");
  EXPECT_EQ(name(D::ModelOpt, fp8_block(), OutRole::Scale), m + ".weight_scale");
  EXPECT_THROW(name(D::ModelOpt, nvfp4_w4a4(), OutRole::WeightShape), Error);
}

TEST(CompressedTensors, ConfigShape) {
  ConfigInput in{llama_model(llama_schemes(Dialect::CompressedTensors)), nullptr};
  json qc = build_quantization_config(Dialect::CompressedTensors, in).quantization_config;
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "mixed-precision");
  EXPECT_EQ(qc["quantization_status"], "compressed");
  EXPECT_TRUE(qc["kv_cache_scheme"].is_null());
  EXPECT_EQ(qc["config_groups"].size(), 5u);
  std::set<std::string> ignore(qc["ignore"].begin(), qc["ignore"].end());
  EXPECT_TRUE(ignore.count("lm_head"));
  EXPECT_TRUE(ignore.count("model.layers.0.self_attn.q_proj"));
  EXPECT_EQ(ignore.size(), 8u);  // layer 0's seven linears and lm_head
  for (const auto& [name, g] : qc["config_groups"].items()) {
    EXPECT_FALSE(g["format"].is_null()) << name;
    for (const auto& t : g["targets"]) EXPECT_EQ(t.get<std::string>().rfind("re:", 0), std::string::npos);
  }
}

TEST(CompressedTensors, SingleFormatAtTopLevelAndExpertsCompressed) {
  auto ms = kimi_model({fp8_ptpc(), {}, fp8_ptpc(), {}, fp8_ptpc(), {}});
  json qc = build_quantization_config(Dialect::CompressedTensors, {ms, nullptr}).quantization_config;
  EXPECT_EQ(qc["format"], "float-quantized");
  ASSERT_EQ(qc["config_groups"].size(), 1u);
  std::size_t regex = 0;
  for (const auto& t : qc["config_groups"]["group_0"]["targets"]) {
    std::string s = t.get<std::string>();
    if (s.rfind("re:", 0) == 0) {
      ++regex;
      EXPECT_EQ(s.back(), '$');
    }
  }
  EXPECT_EQ(regex, 2u);  // one per quantized MoE layer instead of 24 names each
}

TEST(CompressedTensors, SourceGroupsKeptIgnoreRebuilt) {
  // The source quantized every down_proj of layers 1-3 as FP8 block; selq
  // adds schemes elsewhere and leaves layer 0 in float.
  auto ms = llama_model({fp8_ptpc(), nvfp4_w4a4(), mxfp4_w4a4(), fp8_block(), {}, fp8_block()});
  json src_group = scheme_config_json(Dialect::CompressedTensors, fp8_block());
  src_group["targets"] = json::array();
  for (auto& m : ms) {
    if (m.scheme && m.scheme == fp8_block()) {
      m.preexisting = true;
      src_group["targets"].push_back(m.module);
    }
  }
  // layer 3 gate/up are also FP8 block (late_mlp) and fused with each other,
  // so they are preexisting as a pair too.
  json src = {{"quant_method", "compressed-tensors"},
              {"format", "float-quantized"},
              {"config_groups", {{"group_0", src_group}}},
              {"ignore", json::array({"lm_head", "model.layers.1.self_attn.q_proj"})}};
  ConfigInput in{ms, src};
  json qc = build_quantization_config(Dialect::CompressedTensors, in).quantization_config;
  EXPECT_EQ(qc["config_groups"]["group_0"]["targets"], src_group["targets"]);
  EXPECT_EQ(qc["config_groups"].size(), 4u);
  std::set<std::string> ignore(qc["ignore"].begin(), qc["ignore"].end());
  EXPECT_FALSE(ignore.count("model.layers.1.self_attn.q_proj"));  // quantized now
  EXPECT_TRUE(ignore.count("model.layers.0.mlp.down_proj"));
  for (const auto& [name, g] : qc["config_groups"].items()) {
    if (name == "group_0") continue;
    for (const auto& t : g["targets"]) EXPECT_EQ(std::count(src_group["targets"].begin(), src_group["targets"].end(), t), 0);
  }
}

TEST(Quark, ConfigShape) {
  ConfigInput in{dspark_model(dspark_schemes(Dialect::Quark)), nullptr};
  json qc = build_quantization_config(Dialect::Quark, in).quantization_config;
  EXPECT_EQ(qc["quant_method"], "quark");
  EXPECT_EQ(qc["export"]["kv_cache_group"], json::array());
  EXPECT_EQ(qc["export"]["pack_method"], "reorder");
  EXPECT_EQ(qc["export"]["weight_format"], "real_quantized");
  EXPECT_EQ(qc["layer_type_quant_config"], json::object());
  EXPECT_TRUE(qc["exclude"].is_array());
  // FP8 PTPC is the most common scheme, so it is global and o_proj overrides.
  EXPECT_EQ(qc["global_quant_config"], scheme_config_json(Dialect::Quark, fp8_ptpc()));
  EXPECT_EQ(qc["layer_quant_config"].size(), 4u);
  EXPECT_TRUE(qc["layer_quant_config"].contains("model.layers.2.self_attn.o_proj"));
  json nv = scheme_config_json(Dialect::Quark, nvfp4_w4a4());
  EXPECT_TRUE(nv["weight"].is_array() && nv["weight"].size() == 2);
}

TEST(Quark, KeyContainingAnotherModuleNameIsStarred) {
  // vLLM matches a `*`-less key when the module name is a substring of it:
  // "model.x.proj" would take the key "model.x.proj_extra".
  std::vector<ModuleDecision> ms = {{"model.x.proj", fp8_ptpc()},
                                    {"model.x.proj2", fp8_ptpc()},
                                    {"model.x.proj_extra", mxfp4_w4a4()},
                                    {"lm_head", std::nullopt}};
  ConfigInput in{ms, nullptr};
  json qc = build_quantization_config(Dialect::Quark, in).quantization_config;
  EXPECT_TRUE(qc["layer_quant_config"].contains("model.x.proj_extra*")) << qc["layer_quant_config"].dump();
  std::vector<std::string> all = {"model.x.proj", "model.x.proj2", "model.x.proj_extra", "lm_head"};
  EXPECT_EQ(resolve_layer(Engine::VllmQuark, qc, "model.x.proj", all), scheme_config_json(Dialect::Quark, fp8_ptpc()));
  // The unstarred key would have been misread by vLLM but not by SGLang.
  json raw = qc;
  raw["layer_quant_config"] = {{"model.x.proj_extra", scheme_config_json(Dialect::Quark, mxfp4_w4a4())}};
  EXPECT_EQ(resolve_layer(Engine::VllmQuark, raw, "model.x.proj", all),
            scheme_config_json(Dialect::Quark, mxfp4_w4a4()));
  EXPECT_EQ(resolve_layer(Engine::SglangQuark, raw, "model.x.proj", all),
            scheme_config_json(Dialect::Quark, fp8_ptpc()));
}

TEST(Quark, GlobalAvoidsFp4WhenAttentionIsExcluded) {
  // vLLM re-quantizes excluded self_attn linears to MXFP4 for deepseek_v3
  // models whose global weight dtype is fp4.
  auto ms = kimi_model({fp8_ptpc(), {}, fp8_ptpc(), {}, mxfp4_w4a4(), {}});
  json qc = build_quantization_config(Dialect::Quark, {ms, nullptr}).quantization_config;
  EXPECT_EQ(qc["global_quant_config"]["weight"]["dtype"], "fp8_e4m3");
}

TEST(ModelOpt, FilesAndMixedPrecision) {
  ConfigInput in{llama_model(llama_schemes(Dialect::ModelOpt)), nullptr};
  ConfigOutput out = build_quantization_config(Dialect::ModelOpt, in);
  const json& qc = out.quantization_config;
  EXPECT_EQ(qc["quant_method"], "modelopt");
  EXPECT_EQ(qc["quant_algo"], "MIXED_PRECISION");
  EXPECT_EQ(qc["group_size"], 16);
  ASSERT_EQ(out.extra_files.size(), 1u);
  EXPECT_EQ(out.extra_files[0].first, "hf_quant_config.json");
  json hf = json::parse(out.extra_files[0].second);
  EXPECT_EQ(hf["producer"]["name"], "selq");
  for (const char* k : {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules", "quantized_layers"})
    EXPECT_TRUE(hf["quantization"].contains(k)) << k;
  EXPECT_EQ(hf["quantization"]["quantized_layers"].size(), 21u);
}

TEST(ModelOpt, SingleAlgo) {
  auto ms = llama_model({nvfp4_w4a4(), nvfp4_w4a4(), nvfp4_w4a4(), nvfp4_w4a4(), {}, nvfp4_w4a4()});
  ConfigOutput out = build_quantization_config(Dialect::ModelOpt, {ms, nullptr});
  EXPECT_EQ(out.quantization_config["quant_algo"], "NVFP4");
  EXPECT_FALSE(out.quantization_config.contains("quantized_layers"));
  json hf = json::parse(out.extra_files[0].second);
  EXPECT_EQ(hf["quantization"]["group_size"], 16);
  EXPECT_TRUE(hf["quantization"]["kv_cache_quant_algo"].is_null());
}

TEST(ModelOpt, PtpcCannotBeMixed) {
  auto ms = llama_model({fp8_ptpc(), nvfp4_w4a4(), fp8_ptpc(), fp8_ptpc(), {}, fp8_ptpc()});
  EXPECT_THROW(build_quantization_config(Dialect::ModelOpt, {ms, nullptr}), Error);
}

TEST(ModelOpt, RouterDroppedFromSubstringExclusions) {
  // A float router "…mlp.gate" next to a quantized "…mlp.gate_up_proj"
  // would exclude it by substring; the engine never quantizes the router,
  // so the entry is left out.
  std::vector<ModuleDecision> ms = {{"model.layers.0.mlp.gate", std::nullopt},
                                    {"model.layers.0.mlp.gate_proj", fp8_tensor_static()},
                                    {"model.layers.0.mlp.up_proj", fp8_tensor_static()},
                                    {"model.layers.0.mlp.down_proj", fp8_tensor_static()},
                                    {"model.layers.0.mlp.down", std::nullopt}};
  json qc;
  EXPECT_THROW(build_quantization_config(Dialect::ModelOpt, {ms, nullptr}), Error);  // "down" is quantizable
  ms.pop_back();
  qc = build_quantization_config(Dialect::ModelOpt, {ms, nullptr}).quantization_config;
  EXPECT_EQ(qc["ignore"], json::array());
  std::vector<std::string> all = {"model.layers.0.mlp.gate", "model.layers.0.mlp.gate_proj",
                                  "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"};
  json bad = qc;
  bad["ignore"] = {"model.layers.0.mlp.gate"};
  EXPECT_FALSE(resolve_layer(Engine::VllmModelOpt, bad, "model.layers.0.mlp.up_proj", all).has_value());
  EXPECT_TRUE(resolve_layer(Engine::VllmModelOpt, qc, "model.layers.0.mlp.up_proj", all).has_value());
}

}  // namespace
}  // namespace selq::exporter
