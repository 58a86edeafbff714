#include "planner/sensitivity_ranks.h"

#include <chrono>
#include <map>

#include "dist/assign.h"

namespace selq::planner {

namespace {

// The units' shares: by weight bytes, largest first (the same on every rank).
std::vector<int> unit_ranks(const UnitLayout& layout, int ranks) {
  std::vector<std::uint64_t> bytes;
  for (const auto& u : layout.units) {
    std::uint64_t b = 0;
    for (const auto& m : u.members) b += m.weight.nbytes();
    bytes.push_back(b);
  }
  return dist::assign_largest_first(bytes, ranks);
}

}  // namespace

SensitivityTable data_free_sensitivity_on_ranks(const io::Checkpoint& ckpt, const UnitLayout& layout,
                                                const std::vector<Candidate>& candidates,
                                                const SensitivityOptions& options, dist::Ranks& ranks) {
  if (ranks.size() == 1) return data_free_sensitivity(ckpt, layout, candidates, options);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int> rank_of = unit_ranks(layout, ranks.size());
  SensitivityOptions mine = options;
  mine.include = [&](std::size_t k) { return rank_of[k] == ranks.rank() && (!options.include || options.include(k)); };
  SensitivityTable table = data_free_sensitivity(ckpt, layout, candidates, mine);
  const auto texts = ranks.gather_text(ranks.rank() == 0 ? std::string() : table.to_json().dump());
  if (ranks.rank() != 0) return {};
  std::map<std::string, UnitSensitivity> scored;
  for (auto& u : table.units) scored.emplace(u.name, std::move(u));
  for (std::size_t r = 1; r < texts.size(); ++r) {
    SensitivityTable part = SensitivityTable::from_json(nlohmann::json::parse(texts[r]), "rank " + std::to_string(r));
    for (auto& u : part.units) scored.emplace(u.name, std::move(u));
  }
  table.units.clear();
  for (const auto& u : layout.units)
    if (auto it = scored.find(u.name); it != scored.end()) table.units.push_back(std::move(it->second));
  table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return table;
}

void add_runtime_tiers_on_ranks(SensitivityTable& table, const UnitLayout& layout,
                                const std::vector<Candidate>& candidates, const std::string& checkpoint_dir,
                                const CalibrationText& text, Tier tier, const RuntimeTierOptions& options,
                                dist::Ranks& ranks) {
  if (ranks.size() == 1) return add_runtime_tiers(table, layout, candidates, checkpoint_dir, text, tier, options);
  const auto t0 = std::chrono::steady_clock::now();
  const double data_free_s = table.seconds;
  // Every rank starts from rank 0's data-free table (JSON: its doubles read back exactly).
  const std::string data_free = ranks.broadcast_text(ranks.rank() == 0 ? table.to_json().dump() : std::string());
  table = SensitivityTable::from_json(nlohmann::json::parse(data_free), "rank 0's data-free table");
  const std::vector<int> rank_of = unit_ranks(layout, ranks.size());
  RuntimeTierOptions mine = options;
  mine.include = [&](std::size_t k) { return rank_of[k] == ranks.rank(); };
  add_runtime_tiers(table, layout, candidates, checkpoint_dir, text, tier, mine);
  const auto texts = ranks.gather_text(ranks.rank() == 0 ? std::string() : table.to_json().dump());
  if (ranks.rank() != 0) {
    table = {};
    return;
  }
  for (std::size_t r = 1; r < texts.size(); ++r) {
    const SensitivityTable part =
        SensitivityTable::from_json(nlohmann::json::parse(texts[r]), "rank " + std::to_string(r));
    for (std::size_t k = 0; k < layout.units.size(); ++k)
      if (rank_of[k] == static_cast<int>(r)) table.units.at(k).scores = part.units.at(k).scores;
  }
  if (tier == Tier::Measured) fit_unmeasured(table, layout, candidates, options.probe_every);
  table.seconds = data_free_s + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace selq::planner
