#include "pipeline/shared_shard.h"

#include <chrono>
#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {

namespace {
constexpr const char* kPartTag = ".selq-part.r";

std::string part_file(const std::string& staging, const std::string& shard, int rank) {
  return (fs::path(staging) / fmt::format("{}{}{}.json", shard, kPartTag, rank)).string();
}
}  // namespace

PlannedShard part_of(const PlannedShard& shard, const std::vector<int>& tensor_rank, int rank) {
  PlannedShard part{shard.name, {}};
  for (const auto i : shard.tensors)
    if (tensor_rank.at(i) == rank) part.tensors.push_back(i);
  return part;
}

void write_part_records(const std::string& staging, const std::string& shard, int rank, const ShardRecords& records) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [i, r] : records) j.push_back({i, record_to_json(r)});
  io::write_file_atomic(part_file(staging, shard, rank), j.dump());
}

void remove_parts(const std::string& staging) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto& e : fs::directory_iterator(staging, ec)) {
    const std::string name = e.path().filename().string();
    if (name.find(kPartTag) != std::string::npos || name.ends_with(".selq-tmp")) doomed.push_back(e.path());
  }
  for (const auto& p : doomed) fs::remove(p, ec);
}

SharedShardCommits::SharedShardCommits(const Plan& plan, const std::vector<int>& tensor_rank, std::string staging,
                                       Journal& journal, std::vector<bool> open, std::vector<TensorRecord>& records)
    : plan_(plan), staging_(std::move(staging)), journal_(journal), records_(records),
      other_ranks_(plan.shards.size()), open_(std::move(open)), own_done_(plan.shards.size(), false) {
  for (std::size_t s = 0; s < plan.shards.size(); ++s) {
    std::set<int> ranks;
    for (const auto i : plan.shards[s].tensors)
      if (tensor_rank.at(i) != 0) ranks.insert(tensor_rank[i]);
    other_ranks_[s].assign(ranks.begin(), ranks.end());
  }
  looker_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_ && !failed_) {
      // Polled: the parts are files on the shared file system, written by
      // other nodes (no notification reaches this one).
      wake_.wait_for(lock, std::chrono::milliseconds(20));
      if (stopping_) break;
      try {
        commit_ready();
      } catch (...) {
        failed_ = std::current_exception();
      }
    }
  });
}

SharedShardCommits::~SharedShardCommits() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (looker_.joinable()) looker_.join();
}

void SharedShardCommits::rethrow() {
  if (failed_) std::rethrow_exception(failed_);
}

void SharedShardCommits::own_part_done(std::size_t s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    own_done_[s] = true;
    rethrow();
  }
  wake_.notify_all();
}

void SharedShardCommits::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (looker_.joinable()) looker_.join();
  rethrow();
}

// Under mu_.
void SharedShardCommits::commit_ready() {
  for (std::size_t s = 0; s < plan_.shards.size(); ++s) {
    if (!open_[s] || !own_done_[s]) continue;
    bool ready = true;
    for (const int r : other_ranks_[s]) ready = ready && fs::exists(part_file(staging_, plan_.shards[s].name, r));
    if (!ready) continue;
    in_shard(plan_.shards[s].name, [&] {
      for (const int r : other_ranks_[s]) {
        const std::string path = part_file(staging_, plan_.shards[s].name, r);
        try {
          for (const auto& e : nlohmann::json::parse(io::read_file(path)))
            records_.at(e.at(0).get<std::size_t>()) = record_from_json(e.at(1));
        } catch (const nlohmann::json::exception& e) {
          throw_bad_input(fmt::format("unreadable part records: {}", e.what()), {path});
        }
      }
      commit(s);
    });
  }
}

void SharedShardCommits::commit_rest() {
  stop();
  for (std::size_t s = 0; s < plan_.shards.size(); ++s)
    if (open_[s]) in_shard(plan_.shards[s].name, [&] { commit(s); });
}

void SharedShardCommits::commit(std::size_t s) {
  const PlannedShard& shard = plan_.shards[s];
  ShardRecords shard_records;
  for (const auto i : shard.tensors) shard_records.emplace_back(i, records_.at(i));
  commit_shared_shard(plan_, shard, (fs::path(staging_) / shard.name).string(), journal_, shard_records);
  open_[s] = false;
  std::error_code ec;
  for (const int r : other_ranks_[s]) fs::remove(part_file(staging_, shard.name, r), ec);
}

}  // namespace selq::pipeline::detail
