// The GPTQ pass under a Hessian budget (GptqPassOptions::hessian_budget):
// a layer's linears rounded in batches, each batch's Hessians summed from its
// own recorded input rows, give the same rounded weights as the fewest batches; a rerun
// reuses the batch files a killed run left; each module's calibration tokens
// are recorded (a routed expert's: the tokens routed to it). And
// its gate (calibration/gptq_gate.h): the held-out sequences, the record of every
// module, and weights that are the kept candidate's exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../small_synth.h"
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
  pipeline::write_synth_checkpoint(test::small_moe_synth(), (dir / "src").string());
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

  // Every token reaches num_experts_per_tok routed experts of the MoE layer and every other linear.
  const auto config = nlohmann::json::parse(std::ifstream(dir / "src" / "config.json"));
  const std::int64_t per_token = config.at("num_experts_per_tok"), tokens = 256;
  std::int64_t routed = 0;
  int modules = 0;
  for (const auto& [module, n] : whole->provenance().at("module_tokens").items()) {
    ++modules;
    if (module.find(".mlp.experts.") != std::string::npos) {
      if (module.ends_with("gate_proj")) routed += n.get<std::int64_t>();
    } else {
      EXPECT_EQ(n.get<std::int64_t>(), tokens) << module;
    }
  }
  EXPECT_EQ(routed, tokens * per_token);
  EXPECT_EQ(static_cast<std::size_t>(modules), static_cast<std::size_t>(compared));
  EXPECT_EQ(batched->provenance().at("module_tokens"), whole->provenance().at("module_tokens"));

  // A run killed within a layer: its states not committed, one batch file lost.
  // The rerun rounds that batch alone and gives the same bytes.
  std::vector<fs::path> batch_files;
  for (const auto& e : fs::directory_iterator(dir / "batched"))
    if (e.path().filename().string().starts_with("layer-0001-b")) batch_files.push_back(e.path());
  std::sort(batch_files.begin(), batch_files.end());
  ASSERT_GT(batch_files.size(), 3u);
  const auto kept_time = fs::last_write_time(batch_files.front());
  fs::remove(dir / "batched" / "hidden.json");
  fs::remove(batch_files[2]);
  std::vector<std::string> lines;
  GptqPassOptions o;
  o.texts = {(dir / "text.txt").string()};
  o.max_tokens = 256;
  o.context = 64;
  o.work_dir = (dir / "batched").string();
  o.hessian_budget = 1;
  o.on_progress = [&](const std::string& line) { lines.push_back(line); };
  const auto resumed = run_gptq_pass(*ck, plan, o);
  // Layer 1's line: every batch but the lost one from the previous run (layer 0's: all of them).
  const auto layer1 = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("gptq: layer 2/") != std::string::npos;
  });
  ASSERT_NE(layer1, lines.end());
  EXPECT_NE(layer1->find(fmt::format("({} batches, {} from a previous run;", batch_files.size(), batch_files.size() - 1)),
            std::string::npos)
      << *layer1;
  EXPECT_EQ(fs::last_write_time(batch_files.front()), kept_time);
  for (const auto& t : plan.tensors) {
    if (!t.scheme || t.scheme->rounding.value != quant::Rounding::Gptq) continue;
    const TensorView a = whole->view(t.source), b = resumed->view(t.source);
    ASSERT_EQ(a.bytes.size(), b.bytes.size()) << t.source;
    EXPECT_EQ(0, std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size())) << t.source;
  }
  EXPECT_EQ(resumed->provenance().at("gate"), whole->provenance().at("gate"));
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
    const TensorView stored = gated->view(t.source);  // MXFP4's values: BF16
    EXPECT_EQ(stored.info->dtype, DType::BF16) << t.module;
    std::vector<float> values(nearest.size());
    load_floats(stored.info->dtype, stored.bytes.data(), 0, values.size(), values.data());
    const bool same = values == nearest;
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

namespace selq::calibration {
namespace {

// A routed expert few tokens reach (kRareExpertGptqRule): its gate/up Hessian is
// completed to expert_prior × in tokens with the layer's routed-token mean, so
// an unreached expert's gate/up are rounded by GPTQ (its down_proj, whose input
// is the expert's own, by mse); with the prior off all three are mse.
TEST(GptqPass, RarelyRoutedExpertsGetTheLayersMeanAsPseudoTokens) {
  const fs::path dir = small_deepseek("selq-gptq-prior");
  const std::string src = (dir / "src").string();
  std::ofstream(dir / "text.txt") << "Few tokens: some experts see none.";
  const auto recipe = recipe::parse_recipe(
      "name: g\narch: deepseek-v3\ndialect: compressed-tensors\n"
      "rules: [{match: '*mlp.experts.*', scheme: mxfp4, options: {activations: none, rounding: gptq}}]\n",
      "g.yaml");
  const auto ck = io::Checkpoint::open(src);
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  auto pass = [&](double prior, const std::string& work) {
    GptqPassOptions o;
    o.texts = {(dir / "text.txt").string()};
    o.max_tokens = 6;
    o.context = 6;
    o.work_dir = (dir / work).string();
    o.expert_prior = prior;
    return run_gptq_pass(*ck, plan, o);
  };
  const auto with = pass(1.0, "with"), without = pass(0.0, "without");
  EXPECT_NE(with->fingerprint(), without->fingerprint());
  const auto& tokens = with->provenance().at("module_tokens");
  const auto& pseudo = with->provenance().at("expert_prior");
  EXPECT_FALSE(without->provenance().contains("expert_prior"));
  const auto listed = [](const nlohmann::json& p, const std::string& m) {
    if (!p.contains("unreached")) return false;
    for (const auto& u : p.at("unreached"))
      if (u == m) return true;
    return false;
  };
  const std::int64_t in = ck->find("model.layers.1.mlp.experts.0.gate_proj.weight")->info.shape[1];
  int unreached = 0;
  for (const auto& [module, n] : tokens.items()) {
    const bool reads_input = !module.ends_with("down_proj");
    // 6 tokens: every expert's gate/up is short of `in` tokens and gets the difference.
    EXPECT_EQ(pseudo.contains(module), reads_input) << module;
    if (reads_input) {
      EXPECT_EQ(pseudo.at(module).get<double>(), static_cast<double>(in - n.get<std::int64_t>())) << module;
    }
    if (n.get<std::int64_t>() > 0) continue;
    ++unreached;
    EXPECT_TRUE(listed(without->provenance(), module)) << module;
    EXPECT_EQ(listed(with->provenance(), module), !reads_input) << module;
  }
  EXPECT_GT(unreached, 0);  // 6 tokens, 2 of 4 experts each: some expert is left out
  fs::remove_all(dir);
}

}  // namespace
}  // namespace selq::calibration
