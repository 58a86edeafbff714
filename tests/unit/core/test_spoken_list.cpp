// spoken_list: the separators a sentence uses, for any length.
#include <gtest/gtest.h>

#include "core/spoken_list.h"

namespace selq {
namespace {

TEST(SpokenList, CommasThenTheConjunction) {
  EXPECT_EQ(spoken_list({}, "or"), "");
  EXPECT_EQ(spoken_list({"a"}, "or"), "a");
  EXPECT_EQ(spoken_list({"a", "b"}, "and"), "a and b");
  EXPECT_EQ(spoken_list({"a", "b", "c"}, "or"), "a, b or c");
}

}  // namespace
}  // namespace selq
