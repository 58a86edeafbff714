// recipe::scheme_text is parse_scheme's inverse: every scheme a recipe can
// state, with options off their defaults too, parses back to itself.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "quant/scheme_traits.h"
#include "recipe/recipe.h"

namespace selq::recipe {
namespace {

quant::SchemeSpec parse_back(const SchemeText& t) {
  std::string yaml = fmt::format("name: r\nrules:\n  - match: x\n    scheme: {}\n", t.scheme);
  if (!t.options.empty()) yaml += fmt::format("    options: {}\n", t.options);
  return parse_recipe(yaml, "r.yaml").rules.at(0).scheme;
}

TEST(SchemeText, EveryWritableSchemeParsesBackToItself) {
  for (const quant::SchemeSpec& s : quant::writable_schemes()) {
    if (!quant::act_mismatch(s).empty()) continue;  // no recipe states it (nvfp4 weights, fp8 activations)
    const SchemeText t = scheme_text(s);
    EXPECT_EQ(parse_back(t), s) << t.scheme << " " << t.options;
  }
}

TEST(SchemeText, OptionsOffTheirDefaults) {
  quant::SchemeSpec s{.kind = quant::SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 128};
  s.scale_dtype = DType::BF16;
  s.int_pack_int32 = true;
  EXPECT_EQ(scheme_text(s).scheme, "int4");
  EXPECT_EQ(scheme_text(s).options, "{scale_dtype: bf16, group_size: 128, symmetric: false, pack_int32: true}");
  EXPECT_EQ(parse_back(scheme_text(s)), s);
  quant::SchemeSpec b{.kind = quant::SchemeKind::FP8Block, .act = quant::ActMode::FP8PerTokenGroup128};
  b.block_rows = 64;
  EXPECT_EQ(scheme_text(b).options, "{activations: fp8-per-token-group128, block_size: [64, 128]}");
  EXPECT_EQ(parse_back(scheme_text(b)), b);
  EXPECT_EQ(scheme_text(quant::SchemeSpec{.kind = quant::SchemeKind::NVFP4}).options, "");
}

}  // namespace
}  // namespace selq::recipe
