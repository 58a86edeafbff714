// The GPTQ pass under a Hessian budget (GptqPassOptions::hessian_budget):
// a layer's linears rounded in batches, each batch's Hessians gathered by its
// own run through the layer, give the same rounded weights as one batch.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/rounded_weights.h"
#include "pipeline/synth.h"
#include "recipe/recipe.h"
#include "runtime/gptq_pass.h"
#include "runtime/tokenizer.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

TEST(GptqPass, HessianBudgetGivesTheSameWeights) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-gptq-pass-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  // A small DeepSeek-V3 (MLA, a dense layer, routed and shared experts) that the runtime runs.
  pipeline::SynthOptions so;
  so.arch = "deepseek-v3";
  so.scale = 64;
  so.layers = 2;
  so.experts = 4;
  so.vocab = 320;
  so.extra_files["tokenizer.json"] = Tokenizer::byte_level_json().dump();
  const std::string src = (dir / "src").string();
  pipeline::write_synth_checkpoint(so, src);
  std::ofstream(dir / "text.txt") << std::string(2000, 'a') + "It is a truth universally acknowledged, that a single "
                                                               "man in possession of a good fortune, must be in want "
                                                               "of a wife. " + std::string(300, 'z');
  const auto recipe = recipe::parse_recipe(
      "name: g\narch: deepseek-v3\ndialect: compressed-tensors\nrounding: gptq\n"
      "default: {scheme: nvfp4, options: {activations: none}}\n",
      "g.yaml");
  const auto ck = io::Checkpoint::open(src);
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  ASSERT_TRUE(plan.rounds_gptq());

  auto pass = [&](std::uint64_t budget, const std::string& work) {
    GptqPassOptions o;
    o.texts = {(dir / "text.txt").string()};
    o.max_tokens = 256;
    o.context = 64;
    o.work_dir = (dir / work).string();
    o.hessian_budget = budget;
    return run_gptq_pass(*ck, plan, o);
  };
  const auto whole = pass(0, "whole");
  const auto batched = pass(1, "batched");  // below any input's Hessian: one input per batch
  ASSERT_EQ(whole->fingerprint(), batched->fingerprint());
  int compared = 0;
  for (const auto& t : plan.tensors) {
    if (!t.scheme || t.scheme->rounding.value != quant::Rounding::Gptq) continue;
    const TensorView a = whole->view(t.source), b = batched->view(t.source);
    ASSERT_EQ(a.bytes.size(), b.bytes.size()) << t.source;
    EXPECT_EQ(0, std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size())) << t.source;
    ++compared;
  }
  EXPECT_GT(compared, 20);  // attention, dense, shared and routed experts
  fs::remove_all(dir);
}

}  // namespace
}  // namespace selq::runtime
