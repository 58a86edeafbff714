// The planner's +weighted and +gptq candidates (planner/unit_rounding.h) on a
// tiny random Llama: the Hessians and moments they round with are the source
// model's, checked against sums the test gathers itself through a full
// forward; the weights are GPTQ's with that Hessian and the fused group's
// global scale; the runtime tiers score them (the data-free tier refuses),
// GPTQ's output error is below nearest's, and plan --refine with them leaves
// the model as given.
#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "../runtime/test_model_util.h"
#include "calibration/gptq.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "planner/mix.h"
#include "planner/refine.h"
#include "planner/runtime_tiers.h"
#include "planner/unit_rounding.h"

namespace fs = std::filesystem;
using namespace selq;
using namespace selq::planner;

namespace {

// Σ x xᵀ and the row count of each linear's input, in the test's own double sums.
struct OwnSums {
  std::map<std::string, std::vector<double>> h;
  std::map<std::string, std::int64_t> rows;
  static void hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows) {
    auto& self = *static_cast<OwnSums*>(ctx);
    auto& h = self.h[l.module];
    h.resize(static_cast<std::size_t>(l.in * l.in), 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t i = 0; i < l.in; ++i)
        for (std::int64_t j = 0; j < l.in; ++j)
          h[static_cast<std::size_t>(i * l.in + j)] += static_cast<double>(x[r * l.in + i]) * x[r * l.in + j];
    self.rows[l.module] += rows;
  }
};

class UnitRoundingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("selq-unit-rounding-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    runtime::testing::write_tiny_llama(dir_.string(), runtime::testing::TinyLlama{}, true);
    ckpt_ = io::Checkpoint::open(dir_.string());
    layout_ = decision_units(*ckpt_, exporter::Dialect::CompressedTensors);
    std::mt19937 rng(5);
    std::uniform_int_distribution<std::int32_t> tok(0, 63);
    for (int i = 0; i < 96; ++i) tokens_.push_back(tok(rng));
  }
  void TearDown() override { fs::remove_all(dir_); }

  const DecisionUnit& unit(const std::string& name) const {
    for (const auto& u : layout_.units)
      if (u.name == name) return u;
    throw std::runtime_error("no unit " + name);
  }

  static constexpr std::int64_t kContext = 32;
  fs::path dir_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  UnitLayout layout_;
  std::vector<std::int32_t> tokens_;
};

TEST_F(UnitRoundingTest, HessiansAndMomentsAreTheSourceModelsInputs) {
  auto model = runtime::LlamaModel::load(dir_.string());
  OwnSums own;
  model->set_activation_hook(&OwnSums::hook, &own);
  for (std::size_t b = 0; b < tokens_.size(); b += kContext) {
    model->reset();
    model->forward(std::span(tokens_).subspan(b, std::min<std::size_t>(kContext, tokens_.size() - b)));
  }
  model->set_activation_hook(nullptr, nullptr);
  model->reset();

  RoundingInputs rounding(*model, tokens_, kContext);
  // Layer 1 first, then layer 0 (the hidden states start over), then 1 again.
  for (std::int64_t layer : {1, 0, 1})
    for (const char* m : {"self_attn.k_proj", "self_attn.o_proj", "mlp.down_proj"}) {
      const std::string module = fmt::format("model.layers.{}.{}", layer, m);
      const auto h = rounding.hessian(layer, module);
      const auto& want = own.h.at(module);
      ASSERT_EQ(h.size(), want.size()) << module;
      double max_diff = 0, max_abs = 0;
      for (std::size_t k = 0; k < h.size(); ++k) {
        max_diff = std::max(max_diff, std::abs(h[k] - want[k]));
        max_abs = std::max(max_abs, std::abs(want[k]));
      }
      EXPECT_LT(max_diff, 1e-4 * max_abs) << module;  // float products, double sums
      const auto v = rounding.channel_weights(module);
      const std::int64_t in = static_cast<std::int64_t>(v.size()), rows = own.rows.at(module);
      ASSERT_EQ(static_cast<std::size_t>(in * in), want.size());
      for (std::int64_t c = 0; c < in; ++c)
        EXPECT_NEAR(v[static_cast<std::size_t>(c)], want[static_cast<std::size_t>(c * in + c)] / rows,
                    1e-5 * (1 + want[static_cast<std::size_t>(c * in + c)] / rows))
            << module << " channel " << c;
    }
  EXPECT_TRUE(rounding.channel_weights("model.layers.0.no_such_proj").empty());
}

TEST_F(UnitRoundingTest, GptqWeightsAreGptqWithTheUnitsHessianAndGroupScale) {
  auto model = runtime::LlamaModel::load(dir_.string());
  RoundingInputs rounding(*model, tokens_, kContext);
  const Candidate& gptq = *find_candidate("nvfp4-w4a16+gptq");
  const DecisionUnit& qkv = unit("model.layers.1.self_attn.qkv_proj");
  ASSERT_EQ(qkv.members.size(), 3u);
  EXPECT_THROW(quantized_unit_weights(layout_, qkv, gptq, *model), Error);  // no calibration rows: refused

  const auto got = quantized_unit_weights(layout_, qkv, gptq, *model, &rounding);
  float group_amax = 0;
  for (const auto& m : qkv.members)
    for (float w : model->find_linear(m.module)->weight.to_f32()) group_amax = std::max(group_amax, std::abs(w));
  for (std::size_t i = 0; i < qkv.members.size(); ++i) {
    const runtime::Linear& l = *model->find_linear(qkv.members[i].module);
    ASSERT_TRUE(l.weight.is_bf16());
    const TensorInfo info{l.module, DType::BF16, {l.out, l.in}};
    const TensorView view{&info, std::span(reinterpret_cast<const std::uint8_t*>(l.weight.bf16.data()), l.weight.bf16.size() * 2)};
    calibration::GptqOptions go;
    go.quantize.global_amax = group_amax;
    const auto want = calibration::gptq_round(dialect_spec(layout_, gptq), view, rounding.hessian(1, l.module), go).weight;
    EXPECT_EQ(got[i], want) << l.module;
  }
}

TEST_F(UnitRoundingTest, RuntimeTiersScoreThemAndGptqBeatsNearestOnItsRows) {
  const auto cands = select_candidates({"nvfp4-w4a16", "nvfp4-w4a16+weighted", "nvfp4-w4a16+gptq"}, Hardware::Any,
                                       exporter::Dialect::CompressedTensors);
  EXPECT_THROW(check_tier_scores(cands, Tier::DataFree), Error);
  EXPECT_NO_THROW(check_tier_scores(cands, Tier::ActivationAware));
  SensitivityTable table = data_free_sensitivity(*ckpt_, layout_, cands);
  for (const auto& u : table.units) EXPECT_FALSE(u.scores.count("nvfp4-w4a16+gptq")) << u.name;

  auto model = runtime::LlamaModel::load(dir_.string());
  const auto before = calibration_logprobs(*model, tokens_, kContext);
  RoundingInputs rounding(*model, tokens_, kContext);
  RuntimeTierOptions opt;
  opt.context = kContext;
  opt.rows = 1000;  // every row
  const InputAmax amax = add_activation_aware(table, layout_, cands, *model, tokens_, opt, &rounding);
  add_measured(table, layout_, cands, *model, tokens_, amax, opt, &rounding);
  for (const auto& u : table.units) {
    const auto& near = u.scores.at("nvfp4-w4a16");
    const auto& g = u.scores.at("nvfp4-w4a16+gptq");
    const auto& w = u.scores.at("nvfp4-w4a16+weighted");
    EXPECT_GT(g.weight_nmse, 0) << u.name;
    EXPECT_GT(w.weight_nmse, 0) << u.name;
    ASSERT_TRUE(g.output_nmse && near.output_nmse && g.kl) << u.name;
    EXPECT_LT(*g.output_nmse, *near.output_nmse) << u.name;  // on the rows its Hessian came from
  }
  EXPECT_EQ(calibration_logprobs(*model, tokens_, kContext), before);  // left as given
}

TEST_F(UnitRoundingTest, RefineWithGptqOptionsLeavesTheModelAsGiven) {
  const auto cands = select_candidates({"fp8-w8a16", "nvfp4-w4a16", "nvfp4-w4a16+gptq", "mxfp4-w4a16+weighted"},
                                       Hardware::Any, exporter::Dialect::CompressedTensors);
  SensitivityTable table = data_free_sensitivity(*ckpt_, layout_, cands);
  auto model = runtime::LlamaModel::load(dir_.string());
  RoundingInputs rounding(*model, tokens_, kContext);
  RuntimeTierOptions opt;
  opt.context = kContext;
  add_activation_aware(table, layout_, cands, *model, tokens_, opt, &rounding);
  MixOptions mo;
  mo.tier = Tier::ActivationAware;
  MixPlanner planner(layout_, table, cands, mo);
  const auto start = planner.for_bits_per_weight(6.0);
  ASSERT_TRUE(start);
  const auto before = calibration_logprobs(*model, tokens_, kContext);
  RefineOptions ro;
  ro.evaluations = 6;
  ro.context = kContext;
  const RefineResult r = refine_mix(planner, *start, planner.unit_budget(6.0), *model, tokens_, ro);
  EXPECT_LE(r.loss, r.start_loss);
  EXPECT_GT(r.start_loss, 0);
  EXPECT_EQ(calibration_logprobs(*model, tokens_, kContext), before);
}

}  // namespace
