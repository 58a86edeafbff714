#include "planner/mix.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "export/module_names.h"
#include "recipe/recipe.h"

namespace selq::planner {

MixPlanner::MixPlanner(const UnitLayout& layout, const SensitivityTable& table, std::vector<Candidate> candidates,
                       const MixOptions& options)
    : layout_(layout), candidates_(std::move(candidates)), options_(options) {
  std::vector<std::vector<Option>> unit_options;  // moved into the solver
  for (const auto& unit : layout_.units) {
    const UnitSensitivity* us = table.find(unit.name);
    if (!us)
      throw_bad_input(fmt::format("the sensitivity table has no scores for {} (was it made from another "
                                  "checkpoint? it is for {})",
                                  unit.name, table.source));
    std::vector<Option> opts;
    std::vector<std::size_t> which;
    for (std::size_t c = 0; c < candidates_.size(); ++c) {
      const auto it = us->scores.find(candidates_[c].id);
      if (it == us->scores.end()) continue;  // not scored: cannot apply, or not asked for
      const std::size_t u = unit_options.size();
      if (u < options_.forbidden.size() && options_.forbidden[u].count(candidates_[c].id)) continue;
      const auto cost = unit_cost(layout_, unit, candidates_[c]);
      if (!cost) continue;
      const auto score = objective_score(it->second, candidates_[c], options_.tier, options_.acceptance);
      if (!score)
        throw_bad_input(fmt::format("the sensitivity table has no {} score for {} with {} (it is a {} table)",
                                    tier_name(options_.tier), unit.name, candidates_[c].id, tier_name(table.tier)));
      opts.push_back({*cost, *score});
      which.push_back(c);
    }
    if (opts.empty()) throw_bad_input(fmt::format("no candidate format applies to {}", unit.name));
    std::uint64_t most = 0;
    for (const auto& o : opts) most = std::max(most, o.cost);
    max_linear_bytes_ += most;
    unit_options.push_back(std::move(opts));
    candidate_of_option_.push_back(std::move(which));
  }
  max_linear_bytes_ += layout_.fixed_bytes;
  solver_.emplace(std::move(unit_options), max_linear_bytes_ - layout_.fixed_bytes);
}

std::uint64_t MixPlanner::budget_for(double bpw) const {
  const double total = std::floor(bpw * static_cast<double>(layout_.linear_elements) / 8.0);
  if (total <= static_cast<double>(layout_.fixed_bytes)) return 0;
  return static_cast<std::uint64_t>(total) - layout_.fixed_bytes;
}

Mix MixPlanner::make_mix(const std::vector<std::size_t>& pick) const {
  Mix m;
  m.linear_bytes = layout_.fixed_bytes;
  for (std::size_t u = 0; u < pick.size(); ++u) {
    const Option& o = solver_->units()[u][pick[u]];
    m.choices.push_back({u, candidates_[candidate_of_option_[u][pick[u]]].id, o.cost, o.score});
    m.linear_bytes += o.cost;
    m.score += o.score;
  }
  m.bits_per_weight = layout_.linear_elements
                          ? 8.0 * static_cast<double>(m.linear_bytes) / static_cast<double>(layout_.linear_elements)
                          : 0.0;
  return m;
}

std::vector<std::size_t> MixPlanner::pick_of(const Mix& mix) const {
  std::vector<std::size_t> pick;
  for (const auto& c : mix.choices) {
    const auto& which = candidate_of_option_.at(c.unit);
    std::size_t o = 0;
    while (o < which.size() && candidates_[which[o]].id != c.candidate) ++o;
    if (o == which.size()) throw_unsupported(fmt::format("planner bug: {} is not an option of unit {}", c.candidate, c.unit));
    pick.push_back(o);
  }
  return pick;
}

double MixPlanner::min_bits_per_weight() const {
  return 8.0 * static_cast<double>(solver_->min_cost() + layout_.fixed_bytes) /
         static_cast<double>(std::max<std::uint64_t>(layout_.linear_elements, 1));
}

double MixPlanner::max_bits_per_weight() const {
  return 8.0 * static_cast<double>(max_linear_bytes_) /
         static_cast<double>(std::max<std::uint64_t>(layout_.linear_elements, 1));
}

std::optional<Mix> MixPlanner::for_bits_per_weight(double target_bpw) const {
  auto s = solver_->solve(std::min(budget_for(target_bpw), max_linear_bytes_ - layout_.fixed_bytes));
  if (!s) return std::nullopt;
  return make_mix(s->pick);
}

std::vector<Mix> MixPlanner::pareto(int points) const {
  std::vector<Mix> out;
  const double lo = min_bits_per_weight(), hi = max_bits_per_weight();
  for (int i = 0; i < points; ++i) {
    const double bpw = points == 1 ? hi : lo + (hi - lo) * i / (points - 1);
    if (auto m = for_bits_per_weight(bpw + 1e-9)) {
      if (out.empty() || m->linear_bytes != out.back().linear_bytes || m->score != out.back().score)
        out.push_back(std::move(*m));
    }
  }
  return out;
}

Mix MixPlanner::uniform(const std::string& candidate) const {
  std::vector<std::size_t> pick;
  for (std::size_t u = 0; u < candidate_of_option_.size(); ++u) {
    std::size_t chosen = 0;
    bool found = false;
    for (std::size_t o = 0; o < candidate_of_option_[u].size(); ++o) {
      const auto& id = candidates_[candidate_of_option_[u][o]].id;
      if (id == candidate) {
        chosen = o;
        found = true;
      } else if (!found && id == "bf16") {
        chosen = o;
      }
    }
    pick.push_back(chosen);
  }
  return make_mix(pick);
}

nlohmann::json Mix::to_json(const UnitLayout& layout) const {
  nlohmann::json units = nlohmann::json::object();
  for (const auto& c : choices) units[layout.units[c.unit].name] = c.candidate;
  return {{"bits_per_weight", bits_per_weight},
          {"linear_bytes", linear_bytes},
          {"score", score},
          {"summary", mix_summary(*this, layout)},
          {"units", std::move(units)}};
}

namespace {

// "0-3,7,9-11"
std::string layer_ranges(const std::vector<int>& layers) {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < layers.size();) {
    std::size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    parts.push_back(j == i ? fmt::format("{}", layers[i]) : fmt::format("{}-{}", layers[i], layers[j]));
    i = j + 1;
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

// The unit's modules as globs (what fnmatch-style recipe patterns match
// fast: a regex per rule was tried on every tensor, 4 s at 70,000 tensors),
// with "@L@" where the layer index goes.
std::vector<std::string> unit_globs(const DecisionUnit& u) {
  std::vector<std::string> globs;
  const std::string prefix = u.name + ".";
  const bool nested = std::all_of(u.members.begin(), u.members.end(),
                                  [&](const UnitMember& m) { return m.module.starts_with(prefix); });
  if (u.members.size() > 1 && nested)
    globs.push_back(u.name + ".*");  // all experts of one MoE layer
  else
    for (const auto& m : u.members) globs.push_back(m.module);
  if (u.layer < 0) return globs;
  const std::string needle = fmt::format("layers.{}.", u.layer);
  for (auto& g : globs)
    if (const auto at = g.find(needle); at != std::string::npos)
      g = g.substr(0, at) + "layers.@L@." + g.substr(at + needle.size());
  return globs;
}

std::string join_key(const std::vector<std::string>& v) { return fmt::format("{}", fmt::join(v, "\n")); }

}  // namespace

std::vector<std::string> mix_summary(const Mix& mix, const UnitLayout& layout) {
  // kind -> candidate -> layers
  std::map<std::string, std::map<std::string, std::vector<int>>> by_kind;
  for (const auto& c : mix.choices) {
    const auto& u = layout.units[c.unit];
    by_kind[u.kind][c.candidate].push_back(u.layer);
  }
  std::vector<std::string> lines;
  for (auto& [kind, per] : by_kind) {
    std::vector<std::pair<int, std::string>> parts;
    for (auto& [cand, layers] : per) {
      std::sort(layers.begin(), layers.end());
      parts.emplace_back(layers.front(),
                         layers.front() < 0 ? cand : fmt::format("{} {}", cand, layer_ranges(layers)));
    }
    std::sort(parts.begin(), parts.end());
    std::vector<std::string> texts;
    for (auto& p : parts) texts.push_back(p.second);
    lines.push_back(fmt::format("{}: {}", kind, fmt::join(texts, "; ")));
  }
  return lines;
}

std::string mix_recipe(const Mix& mix, const UnitLayout& layout, const std::string& name,
                       const std::vector<std::string>& header, const ServingContext& serving) {
  // (candidate, globs) -> layers, in the order units first appear.
  struct Group {
    std::string candidate, kind;
    std::vector<std::string> globs;
    std::vector<int> layers;
    double score{0};
  };
  std::vector<Group> groups;
  std::map<std::pair<std::string, std::string>, std::size_t> index;
  std::map<std::string, std::set<int>> layers_with;  // globs -> every layer that has such a unit
  for (const auto& u : layout.units) layers_with[join_key(unit_globs(u))].insert(u.layer);
  for (const auto& c : mix.choices) {
    if (c.candidate == "bf16") continue;
    const auto& u = layout.units[c.unit];
    auto globs = unit_globs(u);
    const auto key = std::make_pair(c.candidate, join_key(globs));
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, groups.size()).first;
      groups.push_back({c.candidate, u.kind, std::move(globs), {}, 0});
    }
    groups[it->second].layers.push_back(u.layer);
    groups[it->second].score += c.score;
  }
  std::string y;
  for (const auto& h : header) y += "# " + h + "\n";
  y += fmt::format("name: {}\n", name);
  if (!serving.arch.empty()) y += fmt::format("arch: {}\n", serving.arch);
  y += fmt::format("dialect: {}\n", exporter::dialect_name(layout.dialect));
  if (serving.constrains())
    y += fmt::format("serving: {{kv_cache: {}, prefill_query_quant: {}}}\n", serving.fp8_kv_cache ? "fp8" : "bf16",
                     serving.fp8_prefill_query);
  y += "rules:\n";
  for (auto& g : groups) {
    std::sort(g.layers.begin(), g.layers.end());
    g.layers.erase(std::unique(g.layers.begin(), g.layers.end()), g.layers.end());
    // Every layer that has this unit: one glob with '*' for the layer.
    const bool every = g.layers.size() == layers_with.at(join_key(g.globs)).size() && g.layers.size() > 1;
    std::vector<std::string> patterns;
    for (const auto& glob : g.globs) {
      const auto at = glob.find("@L@");
      if (at == std::string::npos) {
        patterns.push_back(glob);
      } else if (every) {
        patterns.push_back(glob.substr(0, at) + "*" + glob.substr(at + 3));
      } else {
        for (int l : g.layers) patterns.push_back(glob.substr(0, at) + std::to_string(l) + glob.substr(at + 3));
      }
    }
    const Candidate* cand = find_candidate(g.candidate);
    y += fmt::format("  # {} of layers {}: {} (summed score {:.4g})\n", g.kind,
                     g.layers.front() < 0 ? std::string("-") : layer_ranges(g.layers), cand->description, g.score);
    if (patterns.size() == 1) {
      y += fmt::format("  - match: \"{}\"\n", patterns.front());
    } else {
      y += "  - match:\n";
      for (const auto& p : patterns) y += fmt::format("      - \"{}\"\n", p);
    }
    const recipe::SchemeText text = cand->spec ? recipe::scheme_text(*cand->spec) : recipe::SchemeText{"keep", ""};
    y += fmt::format("    scheme: {}\n", text.scheme);
    if (!text.options.empty()) y += fmt::format("    options: {}\n", text.options);
  }
  if (groups.empty()) y += "  []\n";
  y += "default: null\n";
  return y;
}

}  // namespace selq::planner
