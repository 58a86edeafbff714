// The scheme and activation-mode tables (quant/scheme_traits.h,
// quant/act_modes.h): one row per kind or mode, in enum order, and the
// recipe-facing helpers built from them.
#include <gtest/gtest.h>

#include <algorithm>
#include <iterator>
#include <utility>

#include "quant/act_modes.h"
#include "quant/rounding_traits.h"
#include "quant/scheme.h"
#include "quant/scheme_traits.h"

using namespace selq::quant;

// (The rows' order is checked at compile time, core/enum_table.h.)
TEST(SchemeTraits, EveryKindHasItsNameAndBudget) {
  ASSERT_EQ(all_scheme_traits().size(), kSchemeKindCount);
  // The names recipes, plans and manifests show, written out here (a row whose
  // label changed would silently rename a format in every output).
  const std::pair<SchemeSpec, const char*> named[] = {
      {{.kind = SchemeKind::MXFP4}, "mxfp4"},
      {{.kind = SchemeKind::MXFP8}, "mxfp8"},
      {{.kind = SchemeKind::NVFP4}, "nvfp4"},
      {{.kind = SchemeKind::FP8Tensor}, "fp8-tensor"},
      {{.kind = SchemeKind::FP8Channel}, "fp8-channel"},
      {{.kind = SchemeKind::FP8Block}, "fp8-block128"},
      {{.kind = SchemeKind::IntChannel, .bits = 4}, "int4-channel"},
      {{.kind = SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 128}, "int4-g128-asym"},
      {{.kind = SchemeKind::FP8ChannelE8M0}, "fp8-channel-e8m0"},
  };
  ASSERT_EQ(std::size(named), kSchemeKindCount);
  for (std::size_t i = 0; i < kSchemeKindCount; ++i) {
    const SchemeSpec& s = named[i].first;
    EXPECT_EQ(static_cast<std::size_t>(s.kind), i);  // one per kind, so a new kind must be added here
    EXPECT_EQ(s.name(), named[i].second);
    EXPECT_GT(error_budget(s), 0.0) << named[i].second;
  }
  // Recipe names resolve to their kinds.
  for (const auto& n : recipe_scheme_names()) {
    SchemeSpec s;
    ASSERT_TRUE(spec_from_recipe_name(n, s)) << n;
  }
  EXPECT_EQ(act_mismatch([] {
              SchemeSpec s;
              s.kind = SchemeKind::NVFP4;
              s.act = ActMode::FP8PerToken;
              return s;
            }()),
            "nvfp4 weights take activations 'none' or 'nvfp4'");
}

// writable_schemes() is generated from the rows: every kind is there, under
// every activation mode (what a config read back is matched against, and
// what the schemes', measure's and recipe text's tests loop over).
TEST(SchemeTraits, EveryKindIsWritableUnderEveryActivationMode) {
  const auto all = writable_schemes();
  for (std::size_t k = 0; k < kSchemeKindCount; ++k)
    for (std::size_t a = 0; a < kActModeCount; ++a) {
      const auto kind = static_cast<SchemeKind>(k);
      const auto act = static_cast<ActMode>(a);
      EXPECT_TRUE(std::any_of(all.begin(), all.end(),
                              [&](const SchemeSpec& s) { return s.kind == kind && s.act == act; }))
          << scheme_traits(kind).label({.kind = kind}) << " under " << act_mode_name(act);
    }
}

// What the row says of GPTQ, the F32-scale dialects and its row kernel.
TEST(SchemeTraits, RowsSayWhatGptqAndTheDialectsNeed) {
  EXPECT_TRUE(rounding_takes(Rounding::Gptq, SchemeKind::NVFP4));
  EXPECT_TRUE(rounding_takes(Rounding::Gptq, SchemeKind::IntGroup));
  EXPECT_FALSE(rounding_takes(Rounding::Gptq, SchemeKind::FP8Channel));  // no per-element grid once the clip is searched
  const SchemeSpec channel{.kind = SchemeKind::FP8Channel, .scale_dtype = selq::DType::BF16};
  const SchemeSpec f32 = scheme_traits(SchemeKind::FP8Channel).f32_scale_form(channel);
  EXPECT_EQ(f32.scale_dtype, selq::DType::F32);
  EXPECT_FALSE(f32.scale_keepdim);
  EXPECT_EQ(scheme_traits(SchemeKind::NVFP4).f32_scale_form({.kind = SchemeKind::NVFP4}).nvfp,
            NvfpConvention::ModelOpt);
  EXPECT_EQ(scheme_traits(SchemeKind::FP8Block).f32_scale_form, nullptr);
  // A scale that spans rows has no row kernel (measured by quantizing).
  EXPECT_EQ(scheme_traits(SchemeKind::FP8Tensor).row_kernel, nullptr);
  EXPECT_NE(scheme_traits(SchemeKind::MXFP4).row_kernel, nullptr);
}

TEST(ActModeTraits, StaticModesStoreAnInputScale) {
  ASSERT_EQ(all_act_mode_traits().size(), kActModeCount);
  for (std::size_t i = 0; i < kActModeCount; ++i) {
    const auto a = static_cast<ActMode>(i);
    // A static mode is one whose scheme stores a calibrated input scale.
    SchemeSpec s;
    s.kind = a == ActMode::NVFP4 ? SchemeKind::NVFP4 : SchemeKind::FP8Channel;
    s.act = a;
    EXPECT_EQ(act_mode_traits(a).is_static(), activation_scale_output(s, selq::Shape{4, 32}).has_value())
        << act_mode_name(a);
  }
  EXPECT_STREQ(act_mode_name(ActMode::FP8StaticTensor), "fp8-static");
  EXPECT_EQ(act_mode_traits(ActMode::NVFP4).input_scale, InputScaleKind::NVFP4Global);
}
