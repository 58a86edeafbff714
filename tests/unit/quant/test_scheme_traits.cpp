// The scheme and activation-mode tables (quant/scheme_traits.h,
// quant/act_modes.h): one row per kind or mode, in enum order, and the
// recipe-facing helpers built from them.
#include <gtest/gtest.h>

#include "quant/act_modes.h"
#include "quant/scheme.h"
#include "quant/scheme_traits.h"

using namespace selq::quant;

TEST(SchemeTraits, OneRowPerKindInEnumOrder) {
  ASSERT_EQ(all_scheme_traits().size(), kSchemeKindCount);
  for (std::size_t i = 0; i < kSchemeKindCount; ++i) {
    const auto k = static_cast<SchemeKind>(i);
    EXPECT_EQ(scheme_traits(k).kind, k);
    SchemeSpec s;
    s.kind = k;
    if (k == SchemeKind::IntGroup) s.group_size = 128;
    EXPECT_EQ(s.name(), scheme_traits(k).label(s));
    EXPECT_GT(error_budget(s), 0.0);
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

TEST(ActModeTraits, OneRowPerModeInEnumOrder) {
  ASSERT_EQ(all_act_mode_traits().size(), kActModeCount);
  for (std::size_t i = 0; i < kActModeCount; ++i) {
    const auto a = static_cast<ActMode>(i);
    EXPECT_EQ(act_mode_traits(a).mode, a);
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
