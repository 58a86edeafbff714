// The gptq pass's rounding gate (runtime/gptq_gate.h): the output error it
// measures against a plain sum over explicit rows, the choice it makes, and
// in a whole pass on a small DeepSeek-V3 the held-out sequences, the record of
// every module, and weights that are the kept candidate's exactly.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/rounded_weights.h"
#include "pipeline/synth.h"
#include "quant/gptq_grid.h"
#include "recipe/recipe.h"
#include "runtime/gptq_gate.h"
#include "runtime/gptq_pass.h"
#include "runtime/tokenizer.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

// Σ over explicit rows x of ‖(a − b) x‖², the quantity H = Σ x xᵀ stands for.
double error_over_rows(const std::vector<float>& a, const std::vector<float>& b, int out, int in,
                       const std::vector<std::vector<double>>& xs) {
  double s = 0;
  for (const auto& x : xs)
    for (int i = 0; i < out; ++i) {
      double y = 0;
      for (int j = 0; j < in; ++j) y += (static_cast<double>(a[i * in + j]) - b[i * in + j]) * x[j];
      s += y * y;
    }
  return s;
}

TEST(GptqGate, OutputErrorIsTheErrorOverTheRowsItsHessianSums) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n01;
  const int out = 70, in = 33;  // 70 rows: a panel of 64 and a partial one
  std::vector<std::vector<double>> xs(50, std::vector<double>(in));
  std::vector<double> h(in * in, 0.0);
  for (auto& x : xs) {
    for (auto& v : x) v = n01(rng);
    for (int i = 0; i < in; ++i)
      for (int j = 0; j < in; ++j) h[i * in + j] += x[i] * x[j];
  }
  std::vector<float> a(out * in), b(out * in);
  for (auto& v : a) v = static_cast<float>(n01(rng));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = a[i] + static_cast<float>(0.1 * n01(rng));
  const double want = error_over_rows(a, b, out, in, xs);
  EXPECT_NEAR(output_error(a, b, out, in, h), want, 1e-9 * want);

  // The gate keeps the candidate with less error, relative to the output's energy; a tie keeps GPTQ.
  std::vector<float> closer(a);
  for (std::size_t i = 0; i < closer.size(); ++i) closer[i] += 0.3f * (b[i] - a[i]);
  const GateChoice c1 = gate(a, b, closer, out, in, h);
  EXPECT_FALSE(c1.gptq);
  EXPECT_NEAR(c1.nearest_error, 0.09 * c1.gptq_error, 1e-6 * c1.gptq_error);
  const std::vector<float> zero(a.size(), 0.0f);
  EXPECT_NEAR(c1.gptq_error, want / error_over_rows(a, zero, out, in, xs), 1e-9);
  EXPECT_TRUE(gate(a, closer, b, out, in, h).gptq);
  EXPECT_TRUE(gate(a, b, b, out, in, h).gptq);
}

TEST(GptqGate, APassHoldsOutEveryEighthSequenceAndStoresTheKeptCandidate) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-gptq-gate-{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  pipeline::SynthOptions so;
  so.arch = "deepseek-v3";
  so.scale = 64;
  so.layers = 2;
  so.experts = 4;
  so.vocab = 320;
  so.extra_files["tokenizer.json"] = Tokenizer::byte_level_json().dump();
  const std::string src = (dir / "src").string();
  pipeline::write_synth_checkpoint(so, src);
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
}  // namespace selq::runtime
