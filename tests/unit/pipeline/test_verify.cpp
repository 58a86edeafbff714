#include <gtest/gtest.h>

#include "pipeline/verify.h"

namespace selq::pipeline {
namespace {

TEST(VerifyFinding, FormatsFileTensorProblem) {
  VerifyFinding f{"numeric", "model.safetensors", "a.weight_scale", "bad"};
  EXPECT_EQ(format_finding(f), "model.safetensors: a.weight_scale: [numeric] bad");
}

}  // namespace
}  // namespace selq::pipeline
