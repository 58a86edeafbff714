// A run's memory budget below the minimum is refused before anything is read,
// in words that name no option: the CLI adds --memory-budget, Python memory_budget=.
#include <gtest/gtest.h>

#include "core/error.h"
#include "pipeline/quantize.h"
#include "pipeline/shard_writer.h"

namespace selq::pipeline {
namespace {

TEST(MemoryBudget, BelowTheMinimumIsRefusedWithItsHint) {
  QuantizeOptions options;
  options.memory_budget = kMinMemoryBudget;
  EXPECT_NO_THROW(detail::require_memory_budget(options));
  options.memory_budget = kMinMemoryBudget - 1;
  try {
    detail::require_memory_budget(options);
    FAIL() << "a budget below the minimum was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.hint(), ErrorHint::MemoryBudget);
    EXPECT_NE(e.message().find("below the minimum of 64"), std::string::npos) << e.message();
    EXPECT_EQ(e.message().find("--"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace selq::pipeline
