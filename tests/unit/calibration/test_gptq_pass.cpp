// The GPTQ pass under a Hessian budget (GptqPassOptions::hessian_budget):
// a layer's linears rounded in batches, each batch's Hessians gathered by its
// own run through the layer, give the same rounded weights as one batch. And
// its gate (calibration/gptq_gate.h): the held-out sequences, the record of every
// module, and weights that are the kept candidate's exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "calibration/gptq_pass.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/rounded_weights.h"
#include "pipeline/synth.h"
#include "quant/gptq_grid.h"
#include "recipe/recipe.h"
#include "runtime/text/tokenizer.h"

namespace selq::calibration {
using namespace runtime;  // the runtime's models these tests run
namespace {

namespace fs = std::filesystem;

// A fresh directory with src/: a small DeepSeek-V3 (MLA, a dense layer, routed
// and shared experts) that the runtime runs, with a byte-level tokenizer.
fs::path small_deepseek(const std::string& prefix) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("{}-{}", prefix, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  pipeline::SynthOptions so;
  so.arch = "deepseek-v3";
  so.scale = 64;
  so.layers = 2;
  so.experts = 4;
  so.vocab = 320;
  so.extra_files["tokenizer.json"] = Tokenizer::byte_level_json().dump();
  pipeline::write_synth_checkpoint(so, (dir / "src").string());
  return dir;
}

TEST(GptqPass, HessianBudgetGivesTheSameWeights) {
  const fs::path dir = small_deepseek("selq-gptq-pass");
  const std::string src = (dir / "src").string();
  std::ofstream(dir / "text.txt") << std::string(2000, 'a') + "It is a truth universally acknowledged, that a single "
                                                               "man in possession of a good fortune, must be in want "
                                                               "of a wife. " + std::string(300, 'z');
  const auto recipe = recipe::parse_recipe(
      "name: g\narch: deepseek-v3\ndialect: compressed-tensors\nrounding: gptq\n"
      "default: {scheme: nvfp4, options: {activations: none}}\n",
      "g.yaml");
  const auto ck = io::Checkpoint::open(src);
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  ASSERT_TRUE(plan.needs_model_pass());

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

TEST(GptqPass, TheGateHoldsOutEveryEighthSequenceAndStoresTheKeptCandidate) {
  const fs::path dir = small_deepseek("selq-gptq-gate");
  const std::string src = (dir / "src").string();
  std::string text;
  for (int i = 0; i < 40; ++i) text += fmt::format("Line {} of a text that the small model reads, {} times.\n", i, i * 7);
  std::ofstream(dir / "text.txt") << text;
  const auto recipe = recipe::parse_recipe(
      "name: g\narch: deepseek-v3\ndialect: compressed-tensors\nrounding: gptq\n"
      "default: {scheme: mxfp4, options: {activations: none}}\n",
      "g.yaml");
  const auto ck = io::Checkpoint::open(src);
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  auto pass = [&](bool gate_on, const std::string& work) {
    GptqPassOptions o;
    o.texts = {(dir / "text.txt").string()};
    o.max_tokens = 256;
    o.context = 16;  // 16 sequences: the 8th and the 16th held out
    o.work_dir = (dir / work).string();
    o.gate = gate_on;
    return run_gptq_pass(*ck, plan, o);
  };
  const auto gated = pass(true, "gated");
  const auto plain = pass(false, "plain");
  EXPECT_NE(gated->fingerprint(), plain->fingerprint());
  const nlohmann::json& g = gated->provenance().at("gate");
  EXPECT_EQ(g.at("held_out_sequences"), 2);
  EXPECT_EQ(g.at("rule"), kGptqGateRule);
  EXPECT_EQ(plain->provenance().at("gate").at("rule"), "off: turned off");
  const nlohmann::json& modules = g.at("modules");
  EXPECT_EQ(g.at("kept_gptq").get<std::size_t>() + g.at("kept_nearest").get<std::size_t>(), modules.size());
  int checked = 0;
  for (const auto& t : plan.tensors) {
    if (!t.scheme || t.scheme->rounding.value != quant::Rounding::Gptq || !modules.contains(t.module)) continue;
    const auto& m = modules.at(t.module);
    EXPECT_EQ(m.at("kept") == "gptq", m.at("gptq_error").get<double>() <= m.at("nearest_error").get<double>())
        << t.module;
    EXPECT_GT(m.at("held_out_rows").get<std::int64_t>(), 0);
    // The nearest rounding on GPTQ's scales, from the channel weights the writer reads.
    quant::TensorQuantizeOptions qo;
    qo.channel_weights = gated->channel_weights(t.source);
    const auto outs = quant::gptq_scale_outputs(*t.scheme, ck->view(t.source), qo);
    const std::vector<std::span<const std::uint8_t>> views(outs.begin(), outs.end());
    const std::vector<float> nearest = quant::dequantize_weight(*t.scheme, t.source_info.shape, views);
    const TensorView stored = gated->view(t.source);
    const bool same = std::memcmp(stored.bytes.data(), nearest.data(), stored.bytes.size()) == 0;
    if (m.at("kept") == "nearest") {
      EXPECT_TRUE(same) << t.module;
    }
    ++checked;
  }
  EXPECT_GT(checked, 20);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace selq::calibration
