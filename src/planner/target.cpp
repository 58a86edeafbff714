#include "planner/target.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "pipeline/manifest.h"
#include "pipeline/plan.h"
#include "recipe/recipe.h"

namespace selq::planner {

void check_mix_recipe(const io::Checkpoint& ckpt, const UnitLayout& layout, const Mix& mix,
                      const std::string& recipe_yaml, const InputAmax& activation_amax,
                      const std::string& calibration_path) {
  auto recipe = recipe::parse_recipe(recipe_yaml, "planned recipe");
  pipeline::PlanOptions options;
  options.activation_amax = activation_amax;
  options.calibration_path = calibration_path;
  auto plan = pipeline::make_plan(ckpt, recipe, options);
  std::map<std::string, const pipeline::PlannedTensor*> by_module;
  for (const auto& t : plan.tensors)
    if (t.source.ends_with(".weight")) by_module[t.module] = &t;
  for (const auto& c : mix.choices) {
    const Candidate* cand = find_candidate(c.candidate);
    for (const auto& m : layout.units[c.unit].members) {
      const auto it = by_module.find(m.module);
      const bool quantized = it != by_module.end() && it->second->scheme.has_value();
      const bool ok = cand->spec ? quantized && *it->second->scheme == dialect_spec(layout, *cand) &&
                                       it->second->scheme->rounding.value == cand->spec->rounding.value
                                 : !quantized;
      if (!ok)
        throw_unsupported(fmt::format("planner bug: the emitted recipe plans {} as {}, the mix chose {}", m.module,
                                      quantized ? it->second->scheme->name() : "unquantized", c.candidate));
    }
  }
  const auto totals = plan.linear_totals();
  if (totals.bytes != mix.linear_bytes)
    throw_unsupported(fmt::format("planner bug: the emitted recipe stores {} linear bytes, the mix predicted {}",
                                  totals.bytes, mix.linear_bytes));
  // make_plan has built the config and checked it against every engine.
}

namespace {

// Replaces r.mix by its refinement on the real model.
void refine(const io::Checkpoint& ckpt, const TargetRequest& req, const MixPlanner& planner, TargetResult& r) {
  auto cal = calibration_tokens(ckpt.dir(), req.refine_text, rounding_tokens_for(r.candidates));
  r.refine_text = std::move(cal.provenance);
  auto model = runtime::load_model(ckpt.dir());
  RefineOptions ro;
  ro.evaluations = req.refine;
  ro.context = req.refine_context;
  ro.acceptance = req.acceptance;
  ro.on_progress = req.on_refine_progress;
  ro.input_amax = req.activation_amax;
  ro.rounding_tokens = std::move(cal.rounding);
  r.refinement = refine_mix(planner, *r.mix, planner.unit_budget(*req.target_bpw), *model, cal.tokens, ro);
  r.mix = r.refinement->mix;
}

}  // namespace

TargetResult plan_target(const io::Checkpoint& ckpt, const TargetRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  TargetResult r;
  r.table = load_sensitivity(req.sensitivity_path);
  r.layout = decision_units(ckpt, req.dialect);
  r.tier = req.tier.value_or(r.table.tier);
  r.acceptance = req.acceptance;
  // Only measured scores and refinement see total variation; the other tiers
  // would plan for their own error measure under the acceptance label.
  if (req.acceptance && r.tier != Tier::Measured && req.refine <= 0)
    throw_bad_input(fmt::format("objective 'acceptance' needs total-variation scores: the {} tier has none; use a "
                                "measured table (sensitivity tier 'measured') or refine the mix end to end",
                                tier_name(r.tier)),
                    {}, ErrorHint::Refine);
  r.candidates = select_candidates(req.candidates.empty() ? r.table.candidates : req.candidates, req.hardware,
                                   req.dialect);
  if (req.activation_amax.empty()) {
    // Calibrated candidates cannot be quantized without the amax; asked for by name, that is an error.
    for (const auto& id : req.candidates)
      if (const Candidate* c = find_candidate(id); c && c->calibrated())
        throw_bad_input(fmt::format("candidate {} quantizes activations with a static scale, which needs a "
                                    "calibration",
                                    id),
                        {}, ErrorHint::CalibrationFile);
    std::erase_if(r.candidates, [](const Candidate& c) { return c.calibrated(); });
  }
  MixOptions mo{r.tier, req.acceptance, forbidden_candidates(ckpt, r.layout, r.candidates, req.serving)};
  MixPlanner planner(r.layout, r.table, r.candidates, mo);
  r.min_bpw = planner.min_bits_per_weight();
  r.max_bpw = planner.max_bits_per_weight();
  if (req.target_bpw) {
    r.mix = planner.for_bits_per_weight(*req.target_bpw);
    if (!r.mix)
      // Rounded up, so that the number shown is a target that works (the
      // per-tensor scales put uniform NVFP4 a little above 4.5).
      throw_bad_input(fmt::format("a target of {} bits per weight is below the smallest mix these candidates reach ({:.3f} "
                                  "bits per linear weight; the largest is {:.3f})",
                                  *req.target_bpw, std::ceil(r.min_bpw * 1000) / 1000, r.max_bpw));
    if (req.refine > 0) refine(ckpt, req, planner, r);
    std::vector<std::string> header = {
        fmt::format("Planned by selq for {} at <= {} bits per linear weight (got {:.4f}).", ckpt.dir(),
                    *req.target_bpw, r.mix->bits_per_weight),
        fmt::format("Sensitivity: {} ({} tier); objective: {}; hardware: {}.", req.sensitivity_path,
                    tier_name(r.tier),
                    !req.acceptance             ? "KL"
                    : r.tier == Tier::Measured ? "total variation (acceptance)"
                                               : "the tier's score, refined on total variation (acceptance)",
                    hardware_name(req.hardware)),
    };
    if (r.refinement)
      header.push_back(fmt::format("Refined end to end on {} ({} positions): loss {:.5g} -> {:.5g} in {} evaluations.",
                                   r.refine_text.value("source", std::string{}), r.refinement->positions,
                                   r.refinement->start_loss, r.refinement->loss, r.refinement->steps.size()));
    const bool calibrated = std::any_of(r.mix->choices.begin(), r.mix->choices.end(),
                                        [](const auto& c) { return find_candidate(c.candidate)->calibrated(); });
    header.push_back(calibrated ? fmt::format("`selq plan SRC --recipe THIS --calibration {}` reproduces the mix "
                                              "exactly (quantize with the same --calibration); edit freely.",
                                              req.calibration_path)
                                : "`selq plan SRC --recipe THIS` reproduces the mix exactly; edit freely.");
    r.recipe_yaml = mix_recipe(*r.mix, r.layout, req.recipe_name, header, req.serving);
    check_mix_recipe(ckpt, r.layout, *r.mix, r.recipe_yaml, req.activation_amax, req.calibration_path);
  }
  if (req.pareto_points > 0) r.front = planner.pareto(req.pareto_points);
  for (const auto& c : r.candidates) r.uniforms.push_back(planner.uniform(c.id));
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

nlohmann::json TargetResult::to_json() const {
  nlohmann::json j = {{"source", table.source},
                      {"tier", tier_name(tier)},
                      {"candidates", nlohmann::json::array()},
                      {"units", layout.units.size()},
                      {"min_bits_per_weight", min_bpw},
                      {"max_bits_per_weight", max_bpw},
                      {"seconds", seconds}};
  for (const auto& c : candidates) j["candidates"].push_back(c.id);
  if (mix) {
    j["mix"] = mix->to_json(layout);
    j["recipe"] = recipe_yaml;
  }
  if (refinement) {
    j["refine"] = refinement->to_json(layout);
    j["refine"]["objective"] = acceptance ? "tv" : "kl";
    j["refine"]["text"] = refine_text;
  }
  if (!front.empty()) {
    j["pareto"] = nlohmann::json::array();
    for (const auto& m : front) j["pareto"].push_back(m.to_json(layout));
  }
  j["uniform"] = nlohmann::json::object();
  for (std::size_t i = 0; i < uniforms.size(); ++i)
    j["uniform"][candidates[i].id] = {{"bits_per_weight", uniforms[i].bits_per_weight},
                                      {"score", uniforms[i].score}};
  return j;
}

std::string TargetResult::format() const {
  std::string s = fmt::format("{} decision units, {} candidates ({}), {} tier; reachable {:.3f}-{:.3f} bits per "
                              "linear weight\n",
                              layout.units.size(), candidates.size(),
                              fmt::join([&] {
                                std::vector<std::string> v;
                                for (const auto& c : candidates) v.push_back(c.id);
                                return v;
                              }(),
                                        ", "),
                              tier_name(tier), min_bpw, max_bpw);
  s += "\nuniform formats (score = summed predicted loss, lower is better):\n";
  for (std::size_t i = 0; i < uniforms.size(); ++i)
    s += fmt::format("  {:<12} {:>7.3f} bpw  score {:.4g}\n", candidates[i].id, uniforms[i].bits_per_weight,
                     uniforms[i].score);
  if (!front.empty()) {
    s += "\nPareto front:\n";
    for (const auto& m : front) {
      s += fmt::format("  {:>7.3f} bpw  score {:.4g}\n", m.bits_per_weight, m.score);
      for (const auto& line : mix_summary(m, layout)) s += "      " + line + "\n";
    }
  }
  if (refinement) {
    const auto kept = std::count_if(refinement->steps.begin(), refinement->steps.end(),
                                    [](const RefineStep& st) { return st.kept; });
    s += fmt::format("\nrefined end to end ({} evaluations, {} kept{}): measured {} {:.5g} -> {:.5g}\n",
                     refinement->steps.size(), kept, refinement->converged ? ", no untried move left" : "",
                     acceptance ? "total variation" : "KL", refinement->start_loss, refinement->loss);
    for (const auto& st : refinement->steps)
      if (st.kept) s += fmt::format("  {}{}\n", st.raised, st.lowered.empty() ? "" : "; " + st.lowered);
  }
  if (mix) {
    s += fmt::format("\nmix: {:.4f} bits per linear weight, {} linear bytes, score {:.4g}\n", mix->bits_per_weight,
                     mix->linear_bytes, mix->score);
    for (const auto& line : mix_summary(*mix, layout)) s += "  " + line + "\n";
  }
  return s;
}

}  // namespace selq::planner
