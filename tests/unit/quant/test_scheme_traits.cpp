// The scheme table (quant/scheme_traits.h): one row per kind, in enum order,
// and the recipe-facing helpers built from it.
#include <gtest/gtest.h>

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
