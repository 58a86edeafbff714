#include "pipeline/distribute.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "dist/assign.h"
#include "pipeline/journal.h"
#include "pipeline/shard_writer.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {

namespace {
// What a tensor costs to write, in the unit every assignment weighs work by:
// its bytes read and written, and for a quantized one its source bytes twice
// more (on the 5.21 GB synthetic with NVFP4 the ranks' CPU seconds fit
// quantizing a byte at about three times passing it through; weighed by bytes
// alone, the rank given the embedding and lm_head, kept, had 30% less CPU).
std::uint64_t cost(const PlannedTensor& t) { return t.in_bytes() * (t.scheme ? 3 : 1) + t.out_bytes(); }

std::uint64_t heaviest(const Plan& plan, const std::vector<int>& tensor_rank, std::size_t ranks) {
  std::vector<std::uint64_t> load(ranks, 0);
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) load[static_cast<std::size_t>(tensor_rank[i])] += cost(plan.tensors[i]);
  return *std::max_element(load.begin(), load.end());
}
}  // namespace

std::vector<int> assign_shards(const Plan& plan, int ranks) {
  std::vector<std::uint64_t> bytes(plan.shards.size(), 0);
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors) bytes[s] += cost(plan.tensors[i]);
  return dist::assign_largest_first(bytes, ranks);
}

std::vector<int> assign_tensors(const Plan& plan, int ranks) {
  std::vector<int> tensor_rank(plan.tensors.size(), 0);
  std::vector<std::uint64_t> load(static_cast<std::size_t>(std::max(ranks, 1)), 0);
  for (const auto& shard : plan.shards) {
    // Units in the shard's order: a tensor, or a fused group at its first member.
    std::vector<std::vector<std::size_t>> units;
    std::map<std::string, std::size_t> unit_of_group;
    for (const auto i : shard.tensors) {
      const std::string& g = plan.tensors[i].fused_group;
      if (g.empty() || !unit_of_group.count(g)) {
        if (!g.empty()) unit_of_group[g] = units.size();
        units.emplace_back();
      }
      units[g.empty() ? units.size() - 1 : unit_of_group[g]].push_back(i);
    }
    std::vector<std::uint64_t> sizes;
    for (const auto& u : units) {
      sizes.push_back(0);
      for (const auto i : u) sizes.back() += cost(plan.tensors[i]);
    }
    const auto unit_rank = dist::assign_largest_first(sizes, load);
    for (std::size_t k = 0; k < units.size(); ++k)
      for (const auto i : units[k]) tensor_rank[i] = unit_rank[k];
  }
  return tensor_rank;
}

Assignment assign_work(const Plan& plan, int ranks, const std::string& split_by) {
  if (split_by != "auto" && split_by != "shard" && split_by != "tensor")
    throw_bad_input(fmt::format("unknown way to split the work between ranks '{}' (expected auto, shard or tensor)",
                                split_by));
  Assignment a;
  a.shard_rank = assign_shards(plan, ranks);
  a.tensor_rank.assign(plan.tensors.size(), 0);
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors) a.tensor_rank[i] = a.shard_rank[s];
  if (ranks <= 1) return a;
  // Both assignments are cheap to compute: split by tensor when that lightens
  // the heaviest rank by more than 1/128 of an even share, or when some rank
  // would have no shard at all. What splitting adds (a part-record file per
  // rank and shard, rank 0's commit waiting for the slowest part) did not
  // show in the ranks' CPU seconds (docs/BENCHMARKS.md); the margin keeps
  // assignments that differ by noise on the measured path.
  const auto n = static_cast<std::size_t>(ranks);
  std::vector<int> by_tensor = assign_tensors(plan, ranks);
  std::uint64_t total = 0;
  for (const auto& t : plan.tensors) total += cost(t);
  a.by_tensor = split_by == "tensor" ||
                (split_by == "auto" && (plan.shards.size() < n || heaviest(plan, a.tensor_rank, n) >
                                                                       heaviest(plan, by_tensor, n) + total / n / 128));
  if (!a.by_tensor) return a;
  a.shard_rank.assign(plan.shards.size(), 0);
  a.tensor_rank = std::move(by_tensor);
  return a;
}

std::vector<std::string> groups_across_ranks(const Plan& plan, const std::vector<int>& tensor_rank) {
  std::map<std::string, std::set<int>> ranks_of;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    if (!plan.tensors[i].fused_group.empty()) ranks_of[plan.tensors[i].fused_group].insert(tensor_rank[i]);
  std::vector<std::string> out;
  for (const auto& [g, r] : ranks_of)
    if (r.size() > 1) out.push_back(g);
  return out;
}

std::map<std::string, float> exchange_group_amax(dist::Ranks& ranks, ThreadLimit& limit, const TensorSource& source,
                                                 const Plan& plan, const std::vector<std::string>& groups,
                                                 const std::vector<bool>& mine) {
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    if (mine[i] && std::binary_search(groups.begin(), groups.end(), plan.tensors[i].fused_group)) members.push_back(i);
  std::map<std::string, float> local;
  limit.run([&] { local = group_amax_of(source, plan, members); });
  std::vector<float> v;
  for (const auto& g : groups) v.push_back(local.count(g) ? local[g] : 0.0f);
  ranks.max_floats(v);
  std::map<std::string, float> out;
  for (std::size_t k = 0; k < groups.size(); ++k) out[groups[k]] = v[k];
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

Journal open_rank_journal(dist::Ranks& ranks, const std::string& dir, const std::string& base,
                          const std::string& fingerprint, const std::function<void(Journal&)>& lead_checks) {
  std::optional<Journal> journal;
  const auto open = [&] { journal.emplace(journal_file(dir, base, ranks.rank()), fingerprint, journal_files(dir, base)); };
  if (ranks.rank() == 0) {
    open();
    if (lead_checks) lead_checks(*journal);
  }
  ranks.barrier();  // a failure above aborts every rank
  if (ranks.rank() != 0) open();
  return std::move(*journal);
}

void remove_journals(const std::string& dir, const std::string& base) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with(base + ".")) doomed.push_back(e.path());
  for (const auto& p : doomed) fs::remove(p, ec);
}

}  // namespace selq::pipeline::detail
