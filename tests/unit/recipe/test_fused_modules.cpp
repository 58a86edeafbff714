// The one table of fused modules: shards map to the engine module they are
// loaded into, experts' w1/w3 only inside a routed expert.
#include <gtest/gtest.h>

#include "recipe/fused_modules.h"
#include "recipe/names.h"

namespace selq::recipe {
namespace {

TEST(FusedModules, ShardsKeyTheirEngineModule) {
  EXPECT_EQ(fused_shard_key("model.layers.0.self_attn.k_proj"), "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(fused_shard_key("model.layers.0.mlp.up_proj"), "model.layers.0.mlp.gate_up_proj");
  EXPECT_EQ(fused_shard_key("model.layers.1.self_attn.kv_a_proj_with_mqa"),
            "model.layers.1.self_attn.fused_qkv_a_proj");
  EXPECT_EQ(fused_shard_key("model.layers.2.mlp.experts.7.gate_proj"), "model.layers.2.mlp.experts.7.gate_up_proj");
  EXPECT_EQ(fused_shard_key("model.layers.2.block_sparse_moe.experts.7.w3"),
            "model.layers.2.block_sparse_moe.experts.7.w13");
}

TEST(FusedModules, OthersAreAlone) {
  for (const char* m : {"model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj", "lm_head",
                        "model.layers.2.block_sparse_moe.experts.7.w2", "model.layers.0.mlp.w1",  // dense w1: not fused
                        "model.layers.0.self_attn.kv_b_proj", "q_proj"})
    EXPECT_EQ(fused_shard_key(m), "") << m;
}

TEST(FusedModules, SchemeGroupsAreTheFusedModulesOrTheLayersExperts) {
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.0.self_attn.q_proj")),
            "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.3.mlp.experts.9.down_proj")),
            "model.layers.3.mlp.experts");
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.3.self_attn.o_proj")), "");
  // transformers 5's 3-D stacks: both stacks of a layer are its one fused MoE module.
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.3.mlp.experts.gate_up_proj")),
            "model.layers.3.mlp.experts");
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.3.mlp.experts.down_proj")),
            "model.layers.3.mlp.experts");
  EXPECT_EQ(detail::fused_group_key(detail::NameInfo("model.layers.3.mlp.shared_experts.down_proj")), "");
}

}  // namespace
}  // namespace selq::recipe
