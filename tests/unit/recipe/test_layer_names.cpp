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
  // Other families' decoder stacks.
  EXPECT_EQ(layer_index_of("model.decoder.layers.5.fc1"), 5);                        // OPT
  EXPECT_EQ(layer_index_of("gpt_neox.layers.6.attention.dense"), 6);                 // Pythia
  EXPECT_EQ(layer_index_of("backbone.layers.7.mixer.in_proj"), 7);                   // Nemotron-H
  EXPECT_EQ(layer_index_of("transformer.encoder.layers.8.mlp.dense_4h_to_h"), 8);    // ChatGLM
  EXPECT_EQ(layer_index_of("model.text_model.layers.9.self_attn.o_proj"), 9);        // Idefics3
  EXPECT_EQ(layer_index_of("model.vision_model.encoder.layers.2.mlp.fc1"), std::nullopt);
  EXPECT_EQ(layer_index_of("visual.blocks.1.attn.qkv"), std::nullopt);
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
