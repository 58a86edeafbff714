// DeepSeek-V3's own block-FP8 config, read field by field; forms selq does not
// implement are refused by name.
#include <gtest/gtest.h>

#include "core/error.h"
#include "export/dialect_read.h"
#include "export/native_fp8.h"

namespace selq::exporter {
namespace {

std::string refusal(const nlohmann::json& qc) {
  try {
    native_fp8_config(qc, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(NativeFp8, DeepSeekV3Config) {
  const nlohmann::json qc = {{"activation_scheme", "dynamic"}, {"fmt", "e4m3"}, {"quant_method", "fp8"},
                             {"weight_block_size", {128, 128}}};
  const auto f = native_fp8_config(qc, "config.json");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->scheme.kind, quant::SchemeKind::FP8Block);
  EXPECT_EQ(f->scheme.block_rows, 128);
  EXPECT_EQ(f->scheme.scale_dtype, DType::F32);
  EXPECT_EQ(f->scheme.act, quant::ActMode::FP8PerTokenGroup128);
  EXPECT_EQ(native_fp8_tensor("a.o_proj", quant::OutRole::Scale), "a.o_proj.weight_scale_inv");
  EXPECT_FALSE(native_fp8_config({{"quant_method", "compressed-tensors"}}, "config.json"));
}

TEST(NativeFp8, ModulesNotConverted) {
  nlohmann::json qc = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}},
                       {"modules_to_not_convert", {"lm_head", "model.layers.0.mlp.gate"}}};
  const auto f = native_fp8_config(qc, "config.json");
  ASSERT_TRUE(f);
  EXPECT_TRUE(native_fp8_not_converted(*f, "lm_head"));
  EXPECT_TRUE(native_fp8_not_converted(*f, "model.layers.0.mlp.gate"));
  EXPECT_FALSE(native_fp8_not_converted(*f, "model.layers.0.mlp.gate_proj"));
}

TEST(NativeFp8, FormsNotImplementedAreNamed) {
  nlohmann::json qc = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  qc["activation_scheme"] = "static";
  EXPECT_NE(refusal(qc).find("activation_scheme"), std::string::npos);
  qc["activation_scheme"] = "dynamic";
  qc["fmt"] = "e5m2";
  EXPECT_NE(refusal(qc).find("fmt"), std::string::npos);
  qc.erase("fmt");
  qc["weight_block_size"] = {128};
  EXPECT_NE(refusal(qc).find("weight_block_size"), std::string::npos);
  qc.erase("weight_block_size");
  EXPECT_NE(refusal(qc).find("weight_block_size"), std::string::npos);
}

TEST(UnreadQuantMethod, NamesWhatNoReaderTakes) {
  EXPECT_FALSE(unread_quant_method(nlohmann::json()));
  EXPECT_FALSE(unread_quant_method({{"quant_method", "compressed-tensors"}}));
  EXPECT_FALSE(unread_quant_method({{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}}));
  EXPECT_FALSE(unread_quant_method({{"quantization", {{"quant_algo", "FP8"}}}}));  // ModelOpt side file
  EXPECT_EQ(unread_quant_method({{"quant_method", "mxfp4"}}), "mxfp4");           // gpt-oss
  EXPECT_EQ(unread_quant_method({{"quant_method", "gptq"}, {"bits", 4}}), "gptq");
}

}  // namespace
}  // namespace selq::exporter
