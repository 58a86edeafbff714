#include "planner/sensitivity_ranks.h"

#include <chrono>
#include <map>

#include "dist/assign.h"

namespace selq::planner {

SensitivityTable data_free_sensitivity_on_ranks(const io::Checkpoint& ckpt, const UnitLayout& layout,
                                                const std::vector<Candidate>& candidates,
                                                const SensitivityOptions& options, dist::Ranks& ranks) {
  if (ranks.size() == 1) return data_free_sensitivity(ckpt, layout, candidates, options);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> bytes;
  for (const auto& u : layout.units) {
    std::uint64_t b = 0;
    for (const auto& m : u.members) b += m.weight.nbytes();
    bytes.push_back(b);
  }
  const std::vector<int> rank_of = dist::assign_largest_first(bytes, ranks.size());
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

}  // namespace selq::planner
