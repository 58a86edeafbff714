// The end-to-end refinement of a planned mix (planner/refine.h) on a tiny
// random Llama: it stays within the budget, never ends worse than it started,
// leaves the model as given, and when it says it converged no single move of
// its neighbourhood improves the loss (checked on a freshly loaded model).
#include <filesystem>
#include <random>

#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "planner/mix.h"
#include "planner/refine.h"
#include "planner/runtime_tiers.h"
#include "../runtime/test_model_util.h"

namespace fs = std::filesystem;
using namespace selq;
using namespace selq::planner;

namespace {

class RefineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("selq-refine-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    runtime::testing::TinyLlama cfg;
    runtime::testing::write_tiny_llama(dir_.string(), cfg, true);
    ckpt_ = io::Checkpoint::open(dir_.string());
    layout_ = decision_units(*ckpt_, exporter::Dialect::CompressedTensors);
    candidates_ = select_candidates({"bf16", "fp8-w8a16", "nvfp4-w4a16", "mxfp4-w4a4"}, Hardware::Any,
                                    exporter::Dialect::CompressedTensors);
    table_ = data_free_sensitivity(*ckpt_, layout_, candidates_);
    std::mt19937 rng(3);
    std::uniform_int_distribution<std::int32_t> tok(0, 63);
    for (int i = 0; i < 48; ++i) tokens_.push_back(tok(rng));
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The loss of `mix` measured on a model loaded afresh (no state shared with refine_mix).
  double fresh_loss(const MixPlanner& planner, const std::vector<std::size_t>& pick) const {
    auto model = runtime::LlamaModel::load(dir_.string());
    const auto base = calibration_logprobs(*model, tokens_, 16);
    for (std::size_t u = 0; u < pick.size(); ++u) {
      const Candidate& c = planner.candidate_of(u, pick[u]);
      if (c.spec) swap_in_candidate(layout_, layout_.units[u], c, *model);
    }
    return mean_divergence(base, calibration_logprobs(*model, tokens_, 16), model->config().vocab).kl;
  }

  fs::path dir_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  UnitLayout layout_;
  std::vector<Candidate> candidates_;
  SensitivityTable table_;
  std::vector<std::int32_t> tokens_;
};

TEST_F(RefineTest, EndsInALocalOptimumWithinTheBudget) {
  MixPlanner planner(layout_, table_, candidates_, MixOptions{});
  ASSERT_EQ(layout_.units.size(), 8u);  // 2 layers x qkv, o, gate_up, down
  const double bpw = 6.0;
  const auto start = planner.for_bits_per_weight(bpw);
  ASSERT_TRUE(start);
  const std::uint64_t budget = planner.unit_budget(bpw);
  auto model = runtime::LlamaModel::load(dir_.string());
  const auto before = calibration_logprobs(*model, tokens_, 16);

  RefineOptions opt;
  opt.evaluations = 100000;  // far more than the neighbourhood: it must converge
  opt.context = 16;
  opt.width = 1000;          // every raise and lower of every unit
  const RefineResult r = refine_mix(planner, *start, budget, *model, tokens_, opt);

  ASSERT_TRUE(r.converged);
  EXPECT_GE(r.steps.size(), 1u);
  EXPECT_LE(r.mix.linear_bytes - layout_.fixed_bytes, budget);
  EXPECT_LE(r.mix.bits_per_weight, bpw);
  EXPECT_LE(r.loss, r.start_loss);
  // Kept steps strictly improve; the last kept step's loss is the result's.
  double best = r.start_loss;
  for (const auto& s : r.steps)
    if (s.kept) {
      EXPECT_LT(s.loss, best) << s.raised;
      best = s.loss;
    }
  EXPECT_EQ(best, r.loss);
  // The losses it reports are those of the mixes, measured independently.
  EXPECT_NEAR(r.start_loss, fresh_loss(planner, planner.pick_of(*start)), 1e-12);
  const auto pick = planner.pick_of(r.mix);
  EXPECT_NEAR(r.loss, fresh_loss(planner, pick), 1e-12);
  // The model is as it was given.
  EXPECT_EQ(calibration_logprobs(*model, tokens_, 16), before);

  // No move of one raise (and one lower) that the budget allows does better.
  std::uint64_t used = r.mix.linear_bytes - layout_.fixed_bytes;
  int checked = 0;
  for (std::size_t u = 0; u < pick.size(); ++u)
    for (std::size_t a = 0; a < planner.options(u).size(); ++a) {
      const auto& ou = planner.options(u);
      if (ou[a].cost <= ou[pick[u]].cost || ou[a].score >= ou[pick[u]].score) continue;  // not a raise
      for (std::size_t v = 0; v <= pick.size(); ++v)
        for (std::size_t b = 0; b < (v < pick.size() ? planner.options(v).size() : 1); ++b) {
          auto next = pick;
          next[u] = a;
          std::int64_t bytes = static_cast<std::int64_t>(used) + static_cast<std::int64_t>(ou[a].cost) -
                               static_cast<std::int64_t>(ou[pick[u]].cost);
          if (v < pick.size()) {
            const auto& ov = planner.options(v);
            if (v == u || ov[b].cost >= ov[pick[v]].cost) continue;  // not a lower
            next[v] = b;
            bytes += static_cast<std::int64_t>(ov[b].cost) - static_cast<std::int64_t>(ov[pick[v]].cost);
          }
          if (bytes > static_cast<std::int64_t>(budget)) continue;
          EXPECT_GE(fresh_loss(planner, next), r.loss) << "unit " << u << " option " << a << ", unit " << v;
          ++checked;
        }
    }
  EXPECT_GT(checked, 0);
}

TEST_F(RefineTest, NoEvaluationsKeepsTheSolversMixAndIsDeterministic) {
  MixPlanner planner(layout_, table_, candidates_, MixOptions{});
  const auto start = planner.for_bits_per_weight(7.0);
  ASSERT_TRUE(start);
  auto model = runtime::LlamaModel::load(dir_.string());
  RefineOptions opt;
  opt.context = 16;
  opt.evaluations = 0;
  const auto none = refine_mix(planner, *start, planner.unit_budget(7.0), *model, tokens_, opt);
  EXPECT_EQ(planner.pick_of(none.mix), planner.pick_of(*start));
  EXPECT_EQ(none.loss, none.start_loss);
  EXPECT_TRUE(none.steps.empty());

  opt.evaluations = 6;
  const auto a = refine_mix(planner, *start, planner.unit_budget(7.0), *model, tokens_, opt);
  const auto b = refine_mix(planner, *start, planner.unit_budget(7.0), *model, tokens_, opt);
  EXPECT_LE(a.steps.size(), 6u);
  EXPECT_EQ(planner.pick_of(a.mix), planner.pick_of(b.mix));
  EXPECT_EQ(a.loss, b.loss);
  ASSERT_EQ(a.steps.size(), b.steps.size());
  for (std::size_t i = 0; i < a.steps.size(); ++i) EXPECT_EQ(a.steps[i].raised, b.steps[i].raised);
}

}  // namespace

// A calibrated candidate (NVFP4 W4A4) runs with the static scale its input
// amax gives, as the quantized checkpoint will; without the amax it is refused.
TEST_F(RefineTest, CalibratedCandidateTakesItsStaticScaleFromTheAmax) {
  auto model = runtime::LlamaModel::load(dir_.string());
  const Candidate& w4a4 = *find_candidate("nvfp4-w4a4");
  const DecisionUnit& unit = layout_.units.front();
  EXPECT_THROW(swap_in_candidate(layout_, unit, w4a4, *model), Error);
  InputAmax amax;
  for (const auto& m : unit.members) amax[m.module] = 5.0f;
  auto saved = swap_in_candidate(layout_, unit, w4a4, *model, amax);
  for (const auto& m : unit.members) {
    const runtime::Linear* l = model->find_linear(m.module);
    ASSERT_NE(l, nullptr) << m.module;
    EXPECT_EQ(l->act, quant::ActMode::NVFP4);
    EXPECT_EQ(l->act_static_scale, quant::static_scale_for_amax(quant::ActMode::NVFP4, 5.0f));
  }
  swap_back(unit, std::move(saved), *model);
}
