#pragma once
// Internals shared by the file-to-file and in-place quantize paths.
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include "io/checkpoint.h"
#include "pipeline/buffer_pool.h"
#include "pipeline/journal.h"
#include "pipeline/quantize.h"

namespace selq::pipeline::detail {

// Where the bytes of a planned source tensor come from: a view of a local
// mapping, or downloaded bytes the result owns (remote sources).
struct TensorSource {
  std::function<io::FetchedTensor(const std::string& shard, const std::string& tensor)> fetch;
  // Fetched bytes are views of read-only file mappings: a passed-through
  // tensor in flight then holds no memory of its own (sizes the pipeline's
  // tokens), and a consumed tensor's pages may be unmapped.
  bool views_of_files{false};
  // Downloaded bytes: told when the pipeline has read a tensor for the last
  // time (pipeline/remote_reader.h). Null for local sources.
  std::function<void(const std::string& tensor)> done;
  io::FetchedTensor operator()(const std::string& shard, const std::string& tensor) const {
    return fetch(shard, tensor);
  }
};

// The global amax of each NVFP4 fused group (q/k/v, gate/up, w1/w3): the max
// of its members' amax, which all members' global scales share.
class GroupAmax {
 public:
  // Known before the first shard (in place: journaled while every shard is
  // still the original, since a rewritten shard no longer holds its bytes).
  explicit GroupAmax(std::map<std::string, float> known);
  // Computed when the group's first member is quantized, by reading the
  // other members then (file to file): a pass over every member first, as in
  // place needs, kept them mapped or read them twice (peak RSS 408 vs 100 MB
  // on a 3.9 GB checkpoint).
  // `known`: groups whose amax was exchanged between ranks before the first
  // shard (pipeline/distribute.h).
  GroupAmax(const TensorSource& source, const Plan& plan, std::map<std::string, float> known = {});

  // The amax of `member`'s group; waits while another member computes it.
  float of(const PlannedTensor& member);

 private:
  float compute(const std::string& group, const std::string& shard) const;
  std::map<std::string, float> known_;
  const TensorSource* source_{nullptr};
  const Plan* plan_{nullptr};  // null: every amax is known
  std::map<std::string, std::vector<std::size_t>> members_;
  std::mutex mu_;
  std::map<std::string, std::shared_future<float>> amax_;
};

void write_shard(const TensorSource& source, const Plan& plan, const PlannedShard& shard, const std::string& path,
                 const QuantizeOptions& options, GroupAmax& group_amax,
                 Journal& journal, std::vector<TensorRecord>& records, Progress& progress, BufferPool& pool);
// A shard split over ranks (pipeline/shared_shard.h). This rank's part:
// the tensors of `part` (a subset of `shard`) pwritten at their offsets in
// the shard's one temporary file, which every rank writes, then fsynced;
// returns their records.
using ShardRecords = std::vector<std::pair<std::size_t, TensorRecord>>;
ShardRecords write_shard_part(const TensorSource& source, const Plan& plan, const PlannedShard& shard,
                              const PlannedShard& part, const std::string& path, const QuantizeOptions& options,
                              GroupAmax& group_amax, std::vector<TensorRecord>& records, Progress& progress,
                              BufferPool& pool);
// Rank 0, once every part is written: the header, the journal intent with
// the content hash combined from all ranks' records, the rename.
void commit_shared_shard(const Plan& plan, const PlannedShard& shard, const std::string& path, Journal& journal,
                         const ShardRecords& shard_records);
void adopt_committed_shard(const Plan& plan, const PlannedShard& shard, const std::string& path,
                           const Journal& journal, std::vector<TensorRecord>& records, Progress& progress,
                           const QuantizeOptions& options);
// NVFP4 fused-group amax for an in-place run: computed once, before the first
// shard is rewritten, and kept in the journal.
std::map<std::string, float> journaled_group_amax(Journal& journal, const TensorSource& source, const Plan& plan);
void remove_all_quietly(const std::string& path);
// BadInput unless options.memory_budget is at least kMinMemoryBudget: both
// quantize modes check it before anything is read or written.
void require_memory_budget(const QuantizeOptions& options);
// The amax of each fused group over the given members only (a group's
// members on one rank; the ranks' values are then reduced with a max).
std::map<std::string, float> group_amax_of(const TensorSource& source, const Plan& plan,
                                           const std::vector<std::size_t>& members);

// `threads` workers (0: all cores). More than the cores run in an arena of
// their own, oversubscribed: how the memory bound of a large node is tested
// on a small one (the default arena never has more slots than cores).
struct ThreadLimit {
  explicit ThreadLimit(int threads);
  template <class F>
  void run(F&& f) {
    if (arena)
      arena->execute(std::forward<F>(f));
    else
      f();
  }
  std::unique_ptr<tbb::global_control> limit;
  std::unique_ptr<tbb::task_arena> arena;
};

}  // namespace selq::pipeline::detail
