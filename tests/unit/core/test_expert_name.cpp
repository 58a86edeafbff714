// core/expert_name.h: the routed-expert names of the architectures selq reads,
// and the names that look alike but are not one expert's.
#include <gtest/gtest.h>

#include <string>

#include "core/expert_name.h"

using selq::experts_container;
using selq::parse_routed_expert;

TEST(ExpertName, SplitsEachArchitecturesNames) {
  struct Case {
    std::string name, experts, index, rest;
  };
  const Case cases[] = {
      {"model.layers.3.mlp.experts.7.down_proj", "model.layers.3.mlp.experts", "7", "down_proj"},       // DeepSeek-V3
      {"model.layers.0.block_sparse_moe.experts.12.w1.weight", "model.layers.0.block_sparse_moe.experts", "12",
       "w1.weight"},                                                                                     // Mixtral, Kimi
      {"model.layers.1.moe.experts.255", "model.layers.1.moe.experts", "255", ""},                      // a prefix
      {"experts.0.w3", "experts", "0", "w3"},
  };
  for (const auto& c : cases) {
    const auto e = parse_routed_expert(c.name);
    ASSERT_TRUE(e) << c.name;
    EXPECT_EQ(e->experts, c.experts) << c.name;
    EXPECT_EQ(e->index, c.index) << c.name;
    EXPECT_EQ(e->rest, c.rest) << c.name;
  }
}

TEST(ExpertName, RefusesLookAlikes) {
  for (const char* n : {"model.layers.3.mlp.shared_experts.down_proj",  // the shared expert
                        "model.layers.3.mlp.experts.gate_up_proj",       // a 3-D stack, no index
                        "model.layers.3.mlp.experts.",                   // an empty index
                        "model.layers.3.mlp.experts",                    // no index at all
                        "model.layers.3.mlp.my_experts.1.w1",            // another component
                        "model.layers.3.mlp.experts.1a.w1",              // not digits
                        "model.layers.3.mlp.down_proj", ""})
    EXPECT_FALSE(parse_routed_expert(n)) << n;
}

// The fused MoE module's name: a routed expert's or a stack's container.
TEST(ExpertName, ContainerOfExpertsAndStacks) {
  EXPECT_EQ(experts_container("model.layers.3.mlp.experts.9.down_proj"), "model.layers.3.mlp.experts");
  EXPECT_EQ(experts_container("model.layers.3.mlp.experts.gate_up_proj"), "model.layers.3.mlp.experts");
  EXPECT_EQ(experts_container("model.layers.3.block_sparse_moe.experts.0.w1"), "model.layers.3.block_sparse_moe.experts");
  for (const char* n : {"model.layers.3.mlp.shared_experts.down_proj", "model.layers.3.mlp.experts",
                        "model.layers.3.mlp.my_experts.1.w1", "model.layers.3.mlp.down_proj", ""})
    EXPECT_FALSE(experts_container(n)) << n;
}
