// Decision units, data-free scores, the mix and the recipe it emits, on a
// small synthetic Llama checkpoint written by the test.
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/synth.h"
#include "planner/constraints.h"
#include "planner/mix.h"
#include "planner/target.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;
using namespace selq;
using namespace selq::planner;

namespace {

std::unique_ptr<io::Checkpoint> write_synth(const fs::path& dir, const std::string& arch, int scale, int layers,
                                            int experts, std::int64_t vocab) {
  pipeline::SynthOptions o;
  o.arch = arch;
  o.scale = scale;
  o.layers = layers;
  o.experts = experts;
  o.vocab = vocab;
  pipeline::write_synth_checkpoint(o, dir.string());
  return io::Checkpoint::open(dir.string());
}

class PlannerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("selq-planner-{}", ::getpid());
    fs::remove_all(dir_);
    ckpt_ = write_synth(dir_ / "ckpt", "llama", 2, 3, -1, 256).release();
    layout_ = new UnitLayout(decision_units(*ckpt_, exporter::Dialect::CompressedTensors));
    candidates_ = new std::vector<Candidate>(select_candidates({}, Hardware::Any, exporter::Dialect::CompressedTensors));
    table_ = new SensitivityTable(data_free_sensitivity(*ckpt_, *layout_, *candidates_));
    fs::create_directories(dir_ / "out");
    std::ofstream(dir_ / "out" / "sens.json") << table_->to_json().dump();
  }
  static void TearDownTestSuite() {
    delete table_;
    delete candidates_;
    delete layout_;
    delete ckpt_;
    fs::remove_all(dir_);
  }
  static inline fs::path dir_;
  static inline io::Checkpoint* ckpt_ = nullptr;
  static inline UnitLayout* layout_ = nullptr;
  static inline std::vector<Candidate>* candidates_ = nullptr;
  static inline SensitivityTable* table_ = nullptr;
};

const CandidateScore& score(const SensitivityTable& t, const std::string& unit, const std::string& cand) {
  return t.find(unit)->scores.at(cand);
}

}  // namespace

TEST_F(PlannerTest, UnitsAreTheEnginesFusedModules) {
  ASSERT_EQ(layout_->units.size(), 12u);  // 3 layers x {qkv, o, gate_up, down}
  const auto& qkv = layout_->units.front();
  EXPECT_EQ(qkv.name, "model.layers.0.self_attn.qkv_proj");
  EXPECT_EQ(qkv.kind, "self_attn.qkv_proj");
  EXPECT_EQ(qkv.layer, 0);
  ASSERT_EQ(qkv.members.size(), 3u);
  EXPECT_EQ(qkv.members[1].module, "model.layers.0.self_attn.k_proj");
  int gate_up = 0;
  for (const auto& u : layout_->units) gate_up += u.kind == "mlp.gate_up_proj" && u.members.size() == 2;
  EXPECT_EQ(gate_up, 3);
  // The budget's denominator is the plan's: every linear weight element.
  auto plan = pipeline::make_plan(*ckpt_, recipe::parse_recipe("name: k\nrules: []\n", "k"));
  EXPECT_EQ(plan.linear_totals().elements, layout_->linear_elements);
}

TEST_F(PlannerTest, DataFreeScoresOrderTheFormats) {
  for (const auto& u : layout_->units) {
    const double int8 = score(*table_, u.name, "int8-w8a16").weight_nmse;
    const double fp8 = score(*table_, u.name, "fp8-w8a16").weight_nmse;
    const double nvfp4 = score(*table_, u.name, "nvfp4-w4a16").weight_nmse;
    const double mxfp4 = score(*table_, u.name, "mxfp4-w4a16").weight_nmse;
    EXPECT_GT(int8, 0) << u.name;
    EXPECT_LT(int8, fp8) << u.name;
    EXPECT_LT(fp8, nvfp4) << u.name;
    EXPECT_LT(nvfp4, mxfp4) << u.name;
    // Same weights, so W4A4 differs from W4A16 only by the activation prior.
    EXPECT_EQ(score(*table_, u.name, "mxfp4-w4a4").weight_nmse, mxfp4);
    EXPECT_EQ(score(*table_, u.name, "bf16").weight_nmse, 0.0);
  }
  EXPECT_GT(activation_error_prior(quant::ActMode::MXFP4Dynamic), 10 * activation_error_prior(quant::ActMode::FP8PerToken));
  EXPECT_EQ(activation_error_prior(quant::ActMode::None), 0.0);
}

TEST_F(PlannerTest, TableRoundTripsThroughJson) {
  auto back = load_sensitivity((dir_ / "out" / "sens.json").string());
  EXPECT_EQ(back.to_json(), table_->to_json());
  nlohmann::json bad = table_->to_json();
  bad["units"][0]["scores"]["int3-magic"] = {{"weight_nmse", 0.1}};
  EXPECT_THROW(SensitivityTable::from_json(bad, "bad.json"), Error);
  EXPECT_THROW(SensitivityTable::from_json(nlohmann::json::object(), "empty.json"), Error);
}

TEST_F(PlannerTest, EmittedRecipePlansToTheChosenMixExactly) {
  for (double bpw : {4.6, 5.0, 6.0, 7.0, 8.5, 12.0}) {
    TargetRequest req;
    req.sensitivity_path = (dir_ / "out" / "sens.json").string();
    req.target_bpw = bpw;
    auto r = plan_target(*ckpt_, req);  // runs check_mix_recipe itself
    ASSERT_TRUE(r.mix);
    EXPECT_LE(r.mix->bits_per_weight, bpw);
    // Independently: the recipe text, parsed and planned, has the same size and schemes.
    auto recipe = recipe::parse_recipe(r.recipe_yaml, "emitted");
    auto plan = pipeline::make_plan(*ckpt_, recipe);
    EXPECT_EQ(plan.bits_per_weight(), r.mix->bits_per_weight) << r.recipe_yaml;
    std::map<std::string, std::string> scheme_of;
    for (const auto& t : plan.tensors)
      if (t.source.ends_with(".weight")) scheme_of[t.module] = t.scheme ? t.scheme->name() : "bf16";
    for (const auto& c : r.mix->choices) {
      const Candidate* cand = find_candidate(c.candidate);
      for (const auto& m : layout_->units[c.unit].members)
        EXPECT_EQ(scheme_of.at(m.module), cand->spec ? cand->spec->name() : "bf16") << m.module;
    }
  }
}

// Rounding is a dimension of the candidates: "X+mse" scores X's searched-scale
// weights (never a worse weight error than X), and a plan choosing it emits a
// rule with `rounding: mse` whose quantize uses it.
TEST_F(PlannerTest, RoundingCandidatesScoreAndEmitTheirRounding) {
  const Candidate* mse = find_candidate("nvfp4-w4a16+mse");
  ASSERT_NE(mse, nullptr);
  EXPECT_EQ(mse->id, "nvfp4-w4a16+mse");
  EXPECT_EQ(mse->spec->rounding.value, quant::Rounding::Mse);
  EXPECT_EQ(find_candidate("nvfp4-w4a16")->spec->rounding.value, quant::Rounding::Nearest);  // not changed
  EXPECT_EQ(find_candidate("nvfp4-w4a16+mse"), mse);        // one per id
  EXPECT_EQ(find_candidate("nvfp4-w4a16+nearest"), find_candidate("nvfp4-w4a16"));
  EXPECT_EQ(find_candidate("int3+mse"), nullptr);
  EXPECT_EQ(find_candidate("bf16+mse"), nullptr);
  ASSERT_NE(find_candidate("nvfp4-w4a16+weighted"), nullptr);  // scored by the runtime tiers
  EXPECT_TRUE(find_candidate("nvfp4-w4a16+gptq")->rounds_with_calibration());
  EXPECT_FALSE(mse->rounds_with_calibration());
  EXPECT_THROW(find_candidate("fp8-w8a16+gptq"), Error);  // gptq does not round FP8: one line saying so
  EXPECT_THROW(find_candidate("nvfp4-w4a16+sgd"), Error);

  const auto cands = select_candidates({"nvfp4-w4a16", "nvfp4-w4a16+mse", "fp8-w8a16"}, Hardware::Any,
                                       exporter::Dialect::CompressedTensors);
  const SensitivityTable t = data_free_sensitivity(*ckpt_, *layout_, cands);
  for (const auto& u : layout_->units) {
    const double near = score(t, u.name, "nvfp4-w4a16").weight_nmse, searched = score(t, u.name, "nvfp4-w4a16+mse").weight_nmse;
    EXPECT_LT(searched, near) << u.name;
  }
  std::ofstream(dir_ / "out" / "sens-mse.json") << t.to_json().dump();
  TargetRequest req;
  req.sensitivity_path = (dir_ / "out" / "sens-mse.json").string();
  req.target_bpw = 5.0;
  const auto r = plan_target(*ckpt_, req);
  ASSERT_TRUE(r.mix);
  int chose_mse = 0;
  for (const auto& c : r.mix->choices) chose_mse += c.candidate == "nvfp4-w4a16+mse";
  EXPECT_GT(chose_mse, 0);  // same bytes, lower score: preferred over plain NVFP4
  EXPECT_NE(r.recipe_yaml.find("rounding: mse"), std::string::npos) << r.recipe_yaml;
  const auto plan = pipeline::make_plan(*ckpt_, recipe::parse_recipe(r.recipe_yaml, "emitted"));
  int searched_tensors = 0;
  for (const auto& pt : plan.tensors)
    searched_tensors += pt.scheme && pt.scheme->rounding.value == quant::Rounding::Mse;
  EXPECT_GT(searched_tensors, 0);
}

// NVFP4 W4A4 takes a static input scale: planned only with a calibration,
// whose amax the emitted recipe is planned with (input scales counted).
TEST_F(PlannerTest, CalibratedCandidatesNeedTheCalibration) {
  ASSERT_TRUE(find_candidate("nvfp4-w4a4")->calibrated());
  EXPECT_FALSE(find_candidate("nvfp4-w4a16")->calibrated());
  EXPECT_FALSE(find_candidate("fp8-w8a8")->calibrated());  // dynamic per-token
  TargetRequest req;
  req.sensitivity_path = (dir_ / "out" / "sens.json").string();
  req.target_bpw = 6.0;
  auto r = plan_target(*ckpt_, req);
  for (const auto& c : r.candidates) EXPECT_NE(c.id, "nvfp4-w4a4");
  for (const auto& c : r.mix->choices) EXPECT_NE(c.candidate, "nvfp4-w4a4");

  req.candidates = {"nvfp4-w4a4", "fp8-w8a8"};
  try {
    plan_target(*ckpt_, req);
    FAIL() << "nvfp4-w4a4 without a calibration was planned";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs a calibration"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint(), ErrorHint::CalibrationFile);
  }

  for (const auto& u : layout_->units)
    for (const auto& m : u.members) req.activation_amax[m.module] = 3.0f + static_cast<float>(u.layer);
  req.calibration_path = "calib.json";
  r = plan_target(*ckpt_, req);  // runs check_mix_recipe with the amax
  int w4a4 = 0;
  for (const auto& c : r.mix->choices) w4a4 += c.candidate == "nvfp4-w4a4";
  EXPECT_GT(w4a4, 0);
  EXPECT_LT(w4a4, static_cast<int>(r.mix->choices.size()));
  EXPECT_NE(r.recipe_yaml.find("--calibration calib.json"), std::string::npos) << r.recipe_yaml;
  pipeline::PlanOptions po;
  po.activation_amax = req.activation_amax;
  po.calibration_path = "calib.json";
  auto plan = pipeline::make_plan(*ckpt_, recipe::parse_recipe(r.recipe_yaml, "emitted"), po);
  EXPECT_EQ(plan.bits_per_weight(), r.mix->bits_per_weight);
  int input_scales = 0;
  for (const auto& t : plan.tensors)
    if (t.scheme && t.scheme->act == quant::ActMode::NVFP4) {
      ASSERT_TRUE(t.input_amax) << t.module;
      EXPECT_EQ(*t.input_amax, req.activation_amax.at(t.module));
      ++input_scales;
    }
  EXPECT_GT(input_scales, 0);
}

TEST_F(PlannerTest, MoreBudgetNeverPredictsMoreLoss) {
  MixPlanner planner(*layout_, *table_, *candidates_, {});
  auto front = planner.pareto(10);
  ASSERT_GE(front.size(), 5u);
  for (std::size_t i = 1; i < front.size(); ++i) {
    EXPECT_GT(front[i].bits_per_weight, front[i - 1].bits_per_weight);
    EXPECT_LE(front[i].score, front[i - 1].score);
  }
  EXPECT_EQ(front.back().score, 0.0);  // the largest budget keeps everything
  // At uniform NVFP4's size the plan is at least as good as uniform NVFP4.
  auto nv = planner.uniform("nvfp4-w4a16");
  auto mix = planner.for_bits_per_weight(nv.bits_per_weight);
  ASSERT_TRUE(mix);
  EXPECT_LE(mix->score, nv.score);
  EXPECT_LE(mix->linear_bytes, nv.linear_bytes);
}

TEST_F(PlannerTest, HardwareAndDialectRestrictTheCandidates) {
  auto ids = [](const std::vector<Candidate>& cs) {
    std::vector<std::string> v;
    for (const auto& c : cs) v.push_back(c.id);
    return v;
  };
  auto hopper = ids(select_candidates({}, Hardware::Hopper, exporter::Dialect::CompressedTensors));
  EXPECT_EQ(hopper, (std::vector<std::string>{"bf16", "fp8-w8a8", "fp8-w8a16", "int8-w8a16", "int4-w4a16"}));
  auto mi355 = ids(select_candidates({}, Hardware::Mi355, exporter::Dialect::Quark));
  for (const auto& id : mi355) EXPECT_TRUE(id == "bf16" || id.starts_with("fp8") || id.starts_with("mx")) << id;
  EXPECT_THROW(select_candidates({"fp8-w8a8", "int3"}, Hardware::Any, exporter::Dialect::CompressedTensors), Error);
  auto modelopt = ids(select_candidates({}, Hardware::Any, exporter::Dialect::ModelOpt));
  for (const auto& id : modelopt) EXPECT_NE(id, "mxfp4-w4a4") << "modelopt cannot write MXFP4 activations";
}

TEST_F(PlannerTest, BudgetBelowTheCheapestMixIsAClearError) {
  TargetRequest req;
  req.sensitivity_path = (dir_ / "out" / "sens.json").string();
  req.target_bpw = 2.0;
  try {
    plan_target(*ckpt_, req);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("below the smallest mix"), std::string::npos) << e.what();
  }
}

TEST_F(PlannerTest, TableOfAnotherCheckpointIsRefused) {
  SensitivityTable other = *table_;
  other.units.pop_back();
  EXPECT_THROW(MixPlanner(*layout_, other, *candidates_, {}), Error);
  // The data-free table has no measured scores.
  EXPECT_THROW(MixPlanner(*layout_, *table_, *candidates_, {Tier::Measured, false, {}}), Error);
}

TEST(PlannerConstraints, Fp8KvCacheKeepsActivationQuantizationOffMlaKvbAndOproj) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-planner-k3-{}", ::getpid());
  fs::remove_all(dir);
  auto ckpt = write_synth(dir / "ckpt", "kimi-k3", 64, 2, 4, -1);
  auto layout = decision_units(*ckpt, exporter::Dialect::CompressedTensors);
  auto cands = select_candidates({"fp8-w8a8", "fp8-w8a16", "mxfp4-w4a4"}, Hardware::Any, exporter::Dialect::CompressedTensors);
  const ServingContext serving{"kimi-k3", true, true};
  auto forbidden = forbidden_candidates(*ckpt, layout, cands, serving);
  int constrained = 0;
  for (std::size_t u = 0; u < layout.units.size(); ++u) {
    const auto& kind = layout.units[u].kind;
    const bool mla_fed = kind == "self_attn.kv_b_proj" || kind == "self_attn.o_proj";
    if (mla_fed) {
      EXPECT_EQ(forbidden[u], (std::set<std::string>{"fp8-w8a8", "mxfp4-w4a4"})) << layout.units[u].name;
      ++constrained;
    } else {
      EXPECT_TRUE(forbidden[u].empty()) << layout.units[u].name;
    }
  }
  EXPECT_GT(constrained, 0);
  EXPECT_TRUE(forbidden_candidates(*ckpt, layout, cands, {"kimi-k3", false, false})[0].empty());

  // The plan respects it, and its recipe (which states arch and serving) passes the rule itself.
  auto table = data_free_sensitivity(*ckpt, layout, cands);
  fs::create_directories(dir / "out");
  std::ofstream(dir / "out" / "sens.json") << table.to_json().dump();
  TargetRequest req;
  req.sensitivity_path = (dir / "out" / "sens.json").string();
  req.target_bpw = 12.0;  // scaled down, the BF16 head is a large fixed share
  req.serving = serving;
  auto r = plan_target(*ckpt, req);
  EXPECT_NE(r.recipe_yaml.find("serving: {kv_cache: fp8, prefill_query_quant: true}"), std::string::npos);
  EXPECT_NE(r.recipe_yaml.find("arch: kimi-k3"), std::string::npos);
  for (const auto& c : r.mix->choices) {
    const auto& kind = layout.units[c.unit].kind;
    if (kind == "self_attn.kv_b_proj" || kind == "self_attn.o_proj") {
      EXPECT_TRUE(c.candidate == "bf16" || c.candidate == "fp8-w8a16") << layout.units[c.unit].name << " " << c.candidate;
    }
  }
  fs::remove_all(dir);
}

// MoE and MLA: the units are what vLLM builds as one layer, and a planned mix
// of them is exactly what `selq plan` of the emitted recipe writes.
TEST(PlannerUnits, MoeAndMlaUnitsAreTheEnginesLayers) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-planner-units-{}", ::getpid());
  fs::remove_all(dir);
  auto ckpt = write_synth(dir / "ckpt", "kimi-k3", 64, 2, 4, -1);
  auto layout = decision_units(*ckpt, exporter::Dialect::CompressedTensors);
  std::map<std::string, const DecisionUnit*> by_name;
  std::map<std::string, int> owners;
  for (const auto& u : layout.units) {
    by_name[u.name] = &u;
    for (const auto& m : u.members) ++owners[m.module];
  }
  for (const auto& [module, n] : owners) EXPECT_EQ(n, 1) << module << " is in " << n << " units";

  // Layer 1 is an MoE layer: its 4 experts x 3 projections are one unit.
  ASSERT_TRUE(by_name.count("model.layers.1.mlp.experts"));
  const DecisionUnit& experts = *by_name["model.layers.1.mlp.experts"];
  EXPECT_EQ(experts.kind, "mlp.experts");
  EXPECT_EQ(experts.layer, 1);
  EXPECT_EQ(experts.members.size(), 12u);
  for (const auto& m : experts.members) EXPECT_TRUE(m.module.starts_with("model.layers.1.mlp.experts.")) << m.module;
  // MLA's q_a and kv_a share their input and are fused; shared experts' gate/up too.
  ASSERT_TRUE(by_name.count("model.layers.0.self_attn.fused_qkv_a_proj"));
  const auto& qkv_a = by_name["model.layers.0.self_attn.fused_qkv_a_proj"]->members;
  ASSERT_EQ(qkv_a.size(), 2u);
  EXPECT_EQ(qkv_a[0].module, "model.layers.0.self_attn.q_a_proj");
  EXPECT_EQ(qkv_a[1].module, "model.layers.0.self_attn.kv_a_proj_with_mqa");
  ASSERT_TRUE(by_name.count("model.layers.1.mlp.shared_experts.gate_up_proj"));
  EXPECT_EQ(by_name["model.layers.1.mlp.shared_experts.gate_up_proj"]->members.size(), 2u);
  EXPECT_TRUE(by_name.count("model.layers.0.self_attn.kv_b_proj"));
  // The router stays float and is decided by nobody.
  EXPECT_EQ(owners.count("model.layers.1.mlp.gate"), 0u);

  // Planned mixes: the emitted recipe gives every member its unit's format, at the mix's exact size.
  auto cands = select_candidates({}, Hardware::Any, exporter::Dialect::CompressedTensors);
  auto table = data_free_sensitivity(*ckpt, layout, cands);
  fs::create_directories(dir / "out");
  std::ofstream(dir / "out" / "sens.json") << table.to_json().dump();
  // Budgets across what this scaled-down model reaches (its BF16 heads are a large fixed share).
  TargetRequest range;
  range.sensitivity_path = (dir / "out" / "sens.json").string();
  range.pareto_points = 2;
  const TargetResult ends = plan_target(*ckpt, range);
  ASSERT_LT(ends.min_bpw, ends.max_bpw);
  int solved = 0;
  for (double f : {0.05, 0.3, 0.6, 0.95}) {
    TargetRequest req = range;
    req.pareto_points = 0;
    const double bpw = ends.min_bpw + f * (ends.max_bpw - ends.min_bpw);
    req.target_bpw = bpw;
    const std::optional<TargetResult> r = plan_target(*ckpt, req);  // runs check_mix_recipe itself
    ++solved;
    auto plan = pipeline::make_plan(*ckpt, recipe::parse_recipe(r->recipe_yaml, "emitted"));
    EXPECT_EQ(plan.bits_per_weight(), r->mix->bits_per_weight) << r->recipe_yaml;
    std::map<std::string, std::string> scheme_of;
    for (const auto& t : plan.tensors)
      if (t.source.ends_with(".weight")) scheme_of[t.module] = t.scheme ? t.scheme->name() : "bf16";
    std::set<std::string> formats;
    for (const auto& c : r->mix->choices) {
      const Candidate* cand = find_candidate(c.candidate);
      formats.insert(c.candidate);
      for (const auto& m : layout.units[c.unit].members)
        EXPECT_EQ(scheme_of.at(m.module), cand->spec ? cand->spec->name() : "bf16") << m.module << " at " << bpw;
    }
    EXPECT_GT(formats.size(), 1u) << "bpw " << bpw;  // a mix, not one format everywhere
  }
  EXPECT_EQ(solved, 4);
  fs::remove_all(dir);
}

TEST(PlannerObjective, TiersAndAcceptanceReadTheirOwnScores) {
  const Candidate& nv = *find_candidate("nvfp4-w4a16");
  const Candidate& mx = *find_candidate("mxfp4-w4a4");
  CandidateScore s;
  s.weight_nmse = 0.01;
  EXPECT_EQ(objective_score(s, nv, Tier::DataFree, false), 0.01);
  EXPECT_GT(*objective_score(s, mx, Tier::DataFree, false), 0.01);  // plus the activation prior
  EXPECT_FALSE(objective_score(s, nv, Tier::ActivationAware, false).has_value());
  EXPECT_FALSE(objective_score(s, nv, Tier::Measured, false).has_value());
  s.output_nmse = 0.002;
  s.kl = 0.03;
  s.tv = 0.07;
  EXPECT_EQ(objective_score(s, nv, Tier::ActivationAware, false), 0.002);
  EXPECT_EQ(objective_score(s, nv, Tier::Measured, false), 0.03);
  EXPECT_EQ(objective_score(s, nv, Tier::Measured, true), 0.07);
  EXPECT_EQ(objective_score(s, *find_candidate("bf16"), Tier::Measured, true), 0.0);
}
