// verify's scheme reconstruction must invert the dialect writers exactly, or
// every module of a clean checkpoint would be reported.
#include <gtest/gtest.h>

#include "core/error.h"
#include "export/dialect.h"
#include "pipeline/verify.h"

namespace selq::pipeline {
namespace {

using exporter::Dialect;
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

TEST(VerifyScheme, ConfigJsonRoundTripsInEveryDialect) {
  int checked = 0;
  for (auto d : {Dialect::CompressedTensors, Dialect::Quark, Dialect::ModelOpt}) {
    for (auto model : {DType::BF16, DType::F16}) {
      for (const auto& base : sample_specs()) {
        SchemeSpec s;
        try {
          exporter::check_dialect_supports(d, base);
          s = exporter::adapt_scheme_for_dialect(d, base, model);
        } catch (const Error&) {
          continue;
        }
        auto j = exporter::scheme_config_json(d, s);
        auto back = scheme_from_config_json(d, j, model);
        ASSERT_TRUE(back) << exporter::dialect_name(d) << " " << s.name() << " " << j.dump();
        // Same config object and same stored tensors; the scale rounding rule
        // is not recorded in configs, so only the tensor layout must agree.
        EXPECT_EQ(exporter::scheme_config_json(d, *back), j);
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

TEST(VerifyScheme, UnknownConfigObjectIsNotGuessed) {
  nlohmann::json j = {{"weights", {{"num_bits", 3}, {"type", "float"}}}};
  EXPECT_FALSE(scheme_from_config_json(Dialect::CompressedTensors, j, DType::BF16));
  EXPECT_FALSE(scheme_from_name(Dialect::Quark, "fp3-made-up", DType::BF16));
}

TEST(VerifyScheme, ManifestNamesResolve) {
  for (const char* n : {"mxfp4", "fp8-channel", "int4-g128"}) {
    auto s = scheme_from_name(Dialect::CompressedTensors, n, DType::BF16);
    ASSERT_TRUE(s) << n;
    EXPECT_EQ(s->name(), n);
  }
  auto m = scheme_from_name(Dialect::ModelOpt, "nvfp4-modelopt", DType::BF16);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->nvfp, quant::NvfpConvention::ModelOpt);
}

TEST(VerifyScheme, BudgetsFollowPrecision) {
  SchemeSpec fp4, fp8, i8, i4;
  fp4.kind = SchemeKind::MXFP4;
  fp8.kind = SchemeKind::FP8Channel;
  i8.kind = SchemeKind::IntChannel;
  i4.kind = SchemeKind::IntGroup;
  i4.bits = 4;
  i4.group_size = 128;
  EXPECT_LT(error_budget(i8), error_budget(fp8));
  EXPECT_LT(error_budget(fp8), error_budget(fp4));
  EXPECT_DOUBLE_EQ(error_budget(i4), 0.25);
}

TEST(VerifyFinding, FormatsFileTensorProblem) {
  VerifyFinding f{"numeric", "model.safetensors", "a.weight_scale", "bad"};
  EXPECT_EQ(format_finding(f), "model.safetensors: a.weight_scale: [numeric] bad");
}

}  // namespace
}  // namespace selq::pipeline
