#include "pipeline/distribute.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dist/assign.h"
#include "pipeline/journal.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {

std::vector<int> assign_shards(const Plan& plan, int ranks) {
  std::vector<std::uint64_t> bytes(plan.shards.size(), 0);
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors) bytes[s] += plan.tensors[i].in_bytes() + plan.tensors[i].out_bytes();
  return dist::assign_largest_first(bytes, ranks);
}

std::vector<std::string> groups_across_ranks(const Plan& plan, const std::vector<int>& shard_rank) {
  std::map<std::string, std::set<int>> ranks_of;
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors)
      if (!plan.tensors[i].fused_group.empty()) ranks_of[plan.tensors[i].fused_group].insert(shard_rank[s]);
  std::vector<std::string> out;
  for (const auto& [g, r] : ranks_of)
    if (r.size() > 1) out.push_back(g);
  return out;
}

void gather_records(dist::Ranks& ranks, std::vector<TensorRecord>& records, const std::vector<bool>& mine) {
  if (ranks.size() == 1) return;
  nlohmann::json j = nlohmann::json::array();
  for (std::size_t i = 0; i < records.size(); ++i)
    if (mine[i]) j.push_back({i, record_to_json(records[i])});
  const auto texts = ranks.gather_text(j.dump());
  for (std::size_t r = 1; r < texts.size(); ++r)
    for (const auto& e : nlohmann::json::parse(texts[r])) records.at(e.at(0).get<std::size_t>()) = record_from_json(e.at(1));
}

std::string journal_file(const std::string& dir, const std::string& base, int rank) {
  return (fs::path(dir) / (rank == 0 ? base + ".json" : fmt::format("{}.r{}.json", base, rank))).string();
}

std::vector<std::string> journal_files(const std::string& dir, const std::string& base) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == base + ".json" || (name.starts_with(base + ".r") && name.ends_with(".json"))) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void remove_journals(const std::string& dir, const std::string& base) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with(base + ".")) doomed.push_back(e.path());
  for (const auto& p : doomed) fs::remove(p, ec);
}

}  // namespace selq::pipeline::detail
