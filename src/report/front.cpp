#include "report/front.h"

#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "io/checkpoint.h"

namespace selq::report {

planner::TargetResult planner_front(const std::string& sensitivity_path, const planner::SensitivityTable& table,
                                    const ManifestData& manifest, const std::string& source) {
  const std::string src = source.empty() ? manifest.source : source;
  std::unique_ptr<io::Checkpoint> ckpt;
  try {
    ckpt = io::Checkpoint::open(src);
  } catch (const Error& e) {
    throw_bad_input(fmt::format("{}: the front is planned on the source checkpoint, and {} cannot be opened ({})",
                                sensitivity_path, src, e.what()),
                    {}, ErrorHint::SourceCheckpoint);
  }
  planner::TargetRequest req;
  req.sensitivity_path = sensitivity_path;
  req.pareto_points = 12;
  if (!manifest.dialect.empty()) req.dialect = exporter::parse_dialect(manifest.dialect);
  // Every unit of the table must be a module of the reported checkpoint...
  std::set<std::string> modules;
  for (const auto& t : manifest.tensors) modules.insert(t.module);
  for (const auto& u : table.units)
    for (const auto& member : u.members)
      if (!modules.count(member))
        throw_bad_input(fmt::format("{}: unit {} has module {}, which {} does not have (a table of another model?)",
                                    sensitivity_path, u.name, member, manifest.path));
  // ... and of the source (the planner refuses a table that lacks one of its units).
  auto result = planner::plan_target(*ckpt, req);
  if (result.layout.units.size() != table.units.size())
    throw_bad_input(fmt::format("{}: {} units, but {} has {} (a table of another checkpoint?)", sensitivity_path,
                                table.units.size(), src, result.layout.units.size()));
  return result;
}

namespace {

constexpr const char* kSelfColor = "#d62728";

ChartPoint kl_point(const EvalRow& r) {
  // The recipe's name says what the point is; the directory's, where it is unknown.
  ChartPoint p{r.bits_per_weight, r.kl_mean.value, r.kl_mean.lo, r.kl_mean.hi, r.recipe.empty() ? r.name : r.recipe};
  if (!std::isfinite(p.lo) || !std::isfinite(p.hi) || p.lo <= 0) p.lo = p.hi = 0;
  return p;
}

}  // namespace

std::optional<Chart> quality_chart(const EvalData* eval, const planner::TargetResult* plan) {
  Chart c;
  c.id = "chart-quality";
  c.title = "Where the mix sits: bits per weight vs mean KL (95% intervals)";
  c.x_label = "stored bits per linear weight";
  c.y_label = "mean KL(base || quantized)";
  c.log_y = true;
  if (plan && plan->tier == planner::Tier::Measured && !plan->front.empty()) {
    ChartSeries s{"planner's predicted front", {}, true, false, "#7f7f7f"};
    for (const auto& m : plan->front)
      if (m.score > 0) s.points.push_back({m.bits_per_weight, m.score, 0, 0, fmt::format("front at {:.3f} bpw", m.bits_per_weight)});
    if (!s.points.empty()) c.series.push_back(std::move(s));
  }
  if (eval) {
    std::map<RecipeKind, ChartSeries> by_kind;
    for (std::size_t i = 1; i < eval->rows.size(); ++i) {
      const auto& r = eval->rows[i];
      if (i == eval->self || r.kl_mean.value <= 0) continue;
      auto& s = by_kind[r.kind];
      s.name = recipe_kind_name(r.kind) + "s";
      s.line = r.kind == RecipeKind::Planned;
      s.points.push_back(kl_point(r));
    }
    for (auto& [k, s] : by_kind) c.series.push_back(std::move(s));
    const auto& self = eval->rows[eval->self];
    if (self.kl_mean.value > 0)
      c.series.push_back({"this mix", {kl_point(self)}, false, true, kSelfColor});
  }
  if (c.series.empty()) return std::nullopt;
  return c;
}

Chart predicted_front_chart(const planner::TargetResult& plan) {
  Chart c;
  c.id = "chart-predicted";
  c.title = fmt::format("The planner's front ({} tier, predicted)", planner::tier_name(plan.tier));
  c.x_label = "stored bits per linear weight";
  c.y_label = plan.tier == planner::Tier::Measured ? "predicted mean KL" : "summed predicted loss";
  c.log_y = true;
  ChartSeries front{"Pareto front", {}, true, false, "#1f77b4"};
  for (const auto& m : plan.front)
    if (m.score > 0) front.points.push_back({m.bits_per_weight, m.score, 0, 0, fmt::format("mix at {:.3f} bpw", m.bits_per_weight)});
  if (!front.points.empty()) c.series.push_back(std::move(front));
  ChartSeries uni{"uniform formats", {}, false, false, "#ff7f0e"};
  for (std::size_t i = 0; i < plan.uniforms.size() && i < plan.candidates.size(); ++i)
    if (plan.uniforms[i].score > 0)
      uni.points.push_back({plan.uniforms[i].bits_per_weight, plan.uniforms[i].score, 0, 0, plan.candidates[i].id});
  if (!uni.points.empty()) c.series.push_back(std::move(uni));
  return c;
}

Chart depth_chart(const planner::SensitivityTable& table) {
  // The most lossy candidate (largest summed score) shows the differences best.
  std::string worst;
  double worst_sum = -1;
  for (const auto& id : table.candidates) {
    const planner::Candidate* cand = planner::find_candidate(id);
    if (!cand || !cand->spec) continue;
    double sum = 0;
    for (const auto& u : table.units)
      if (auto it = u.scores.find(id); it != u.scores.end())
        sum += planner::objective_score(it->second, *cand, table.tier, false).value_or(0);
    if (sum > worst_sum) {
      worst_sum = sum;
      worst = id;
    }
  }
  Chart c;
  c.id = "chart-depth";
  c.title = fmt::format("Sensitivity by depth under {} ({} tier)", worst, planner::tier_name(table.tier));
  c.x_label = "layer";
  c.y_label = table.tier == planner::Tier::Measured ? "KL when only this unit is quantized" : "predicted loss";
  c.log_y = true;
  const planner::Candidate* cand = worst.empty() ? nullptr : planner::find_candidate(worst);
  std::map<std::string, std::size_t> series_of;
  for (const auto& u : table.units) {
    if (!cand || u.layer < 0) continue;
    auto it = u.scores.find(worst);
    if (it == u.scores.end()) continue;
    const auto v = planner::objective_score(it->second, *cand, table.tier, false);
    if (!v || *v <= 0) continue;
    auto [s, fresh] = series_of.emplace(u.kind, c.series.size());
    if (fresh) c.series.push_back({u.kind, {}});
    c.series[s->second].points.push_back({static_cast<double>(u.layer), *v, 0, 0, u.name});
  }
  return c;
}

}  // namespace selq::report
