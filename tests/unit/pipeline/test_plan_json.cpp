// The plan's JSON is written member by member (plan_report.cpp); it must be
// exactly what nlohmann prints for the same document, pretty and compact.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pipeline/plan.h"

namespace selq::pipeline {
namespace {

Plan small_plan() {
  Plan p;
  p.source = "/src";
  p.recipe_path = "r.yaml";
  p.warnings = {"a warning with \"quotes\"\nand a newline"};
  PlannedTensor w;
  w.source = "model.layers.0.mlp.down_proj.weight";
  w.source_shard = "model.safetensors";
  w.source_info = {w.source, DType::BF16, {64, 128}};
  w.action = recipe::Action::Quantize;
  w.module = "model.layers.0.mlp.down_proj";
  w.scheme = quant::SchemeSpec{};
  w.outputs = {{{w.source, DType::F8_E4M3, {64, 128}}, quant::OutRole::Weight},
               {{"model.layers.0.mlp.down_proj.weight_scale", DType::F32, {64, 1}}, quant::OutRole::Scale}};
  PlannedTensor n;
  n.source = "model.norm.weight";
  n.source_shard = "model.safetensors";
  n.source_info = {n.source, DType::BF16, {128}};
  n.outputs = {{n.source_info, std::nullopt}};
  p.tensors = {w, n};
  p.shards = {{"model.safetensors", {0, 1}}};
  p.linear_modules = {{"model.layers.0.mlp.down_proj", w.scheme, false}};
  return p;
}

TEST(PlanJson, PrettyAndCompactAreNlohmannsBytes) {
  for (const Plan& p : {small_plan(), Plan{}}) {  // and one with every array empty
    const std::string pretty = p.json_text(2), compact = p.json_text(-1);
    const auto j = nlohmann::json::parse(pretty);
    EXPECT_EQ(j.dump(2), pretty);
    EXPECT_EQ(j.dump(), compact);
    EXPECT_EQ(nlohmann::json::parse(compact), j);
  }
  const auto j = nlohmann::json::parse(small_plan().json_text());
  EXPECT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][0]["scheme"], "fp8-channel");
  EXPECT_EQ(j["tensors"][0]["outputs"][1]["name"], "model.layers.0.mlp.down_proj.weight_scale");
  EXPECT_EQ(j["shards"][0]["sources"][1], "model.norm.weight");
  EXPECT_EQ(j["warnings"][0], "a warning with \"quotes\"\nand a newline");
  EXPECT_EQ(j["per_scheme"]["fp8-channel"]["count"], 1);
  EXPECT_EQ(j["linear_modules"][0]["module"], "model.layers.0.mlp.down_proj");
}

TEST(PlanJson, WrittenInPiecesNotOneString) {
  std::size_t pieces = 0, bytes = 0;
  const Plan p = small_plan();
  p.write_json([&](std::string_view s) {
    ++pieces;
    bytes += s.size();
  });
  EXPECT_GT(pieces, 10u);
  EXPECT_EQ(bytes, p.json_text().size());
}

}  // namespace
}  // namespace selq::pipeline
