// The one reading of a name's decoder layer, shared by plan, inspect, the
// planner and the report.
#include <gtest/gtest.h>

#include "recipe/recipe.h"

namespace selq::recipe {
namespace {

TEST(LayerNames, OnlyTheDecoderStackHasLayers) {
  EXPECT_EQ(layer_index_of("model.layers.12.self_attn.o_proj.weight"), 12);
  EXPECT_EQ(layer_index_of("layers.3.mlp.down_proj"), 3);
  EXPECT_EQ(layer_index_of("model.language_model.layers.4.mlp.gate_proj"), 4);
  EXPECT_EQ(layer_index_of("model.embed_tokens.weight"), std::nullopt);
  EXPECT_EQ(layer_index_of("lm_head"), std::nullopt);
  // A vision tower's own stack is not decoder layer 3.
  EXPECT_EQ(layer_index_of("vision_tower.encoder.layers.3.mlp.fc1"), std::nullopt);
}

TEST(LayerNames, KindIsRelativeToTheLayerWithExpertIndicesStarred) {
  EXPECT_EQ(layer_relative_kind("model.layers.0.self_attn.o_proj"), "self_attn.o_proj");
  EXPECT_EQ(layer_relative_kind("model.layers.5.mlp.experts.17.up_proj"), "mlp.experts.*.up_proj");
  EXPECT_EQ(layer_relative_kind("model.layers.5.mlp.experts"), "mlp.experts");
  EXPECT_EQ(layer_relative_kind("model.layers.5.mlp.shared_experts.down_proj"), "mlp.shared_experts.down_proj");
  EXPECT_EQ(layer_relative_kind("lm_head"), "lm_head");
  EXPECT_EQ(layer_relative_kind("vision_tower.encoder.layers.3.mlp.fc1"), "vision_tower.encoder.layers.3.mlp.fc1");
}

}  // namespace
}  // namespace selq::recipe
