#pragma once
// Shards split over ranks (Assignment::by_tensor, pipeline/distribute.h).
// Every rank pwrites its tensors of a shard into the shard's one temporary
// file on the shared file system (offsets come from the plan, so the bytes
// are a single process's), fsyncs it, and leaves its tensor records beside
// it in `SHARD.selq-part.rK.json`. Rank 0 commits a shard (header, journal
// intent with the combined content hash, rename: exactly a single process's
// commit) as soon as every part of it is there, checking between its own
// parts; the shards still open at the end it commits from the records
// gathered over MPI. So no rank waits for another at a shard's end, and no
// tensor bytes cross MPI. A killed rank aborts the job before the shards it
// had a part in are renamed; a rerun (any rank count) rewrites them whole.
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pipeline/distribute.h"
#include "pipeline/journal.h"
#include "pipeline/plan.h"
#include "pipeline/shard_writer.h"

namespace selq::pipeline::detail {

// This rank's tensors of `shard`, in the shard's order (may be none).
PlannedShard part_of(const PlannedShard& shard, const std::vector<int>& tensor_rank, int rank);

// Rank r (> 0) reports its part of a shard: records written atomically.
void write_part_records(const std::string& staging, const std::string& shard, int rank, const ShardRecords& records);

// Removes every part-record file and temporary shard file in `staging`: left
// by a killed run, their shards are rewritten whole.
void remove_parts(const std::string& staging);

// Rank 0's side: which shards are still open and whose parts have arrived.
// A thread looks for finished parts every few milliseconds and commits the
// shards they complete, so a shard is committed soon after its last part,
// not after rank 0's current one.
class SharedShardCommits {
 public:
  // `open`: the shards this run writes (not adopted from an earlier one).
  // `records` is filled with the other ranks' records as their parts arrive;
  // until stop(), the caller writes only rank 0's own.
  SharedShardCommits(const Plan& plan, const std::vector<int>& tensor_rank, std::string staging, Journal& journal,
                     std::vector<bool> open, std::vector<TensorRecord>& records);
  ~SharedShardCommits();
  // Rank 0 has written its own part of shard s (or had none); rethrows a
  // failed commit.
  void own_part_done(std::size_t s);
  // Ends the looking (rethrows a failed commit).
  void stop();
  // After the final gather (every record on rank 0): commits the rest.
  void commit_rest();

 private:
  void commit_ready();
  void commit(std::size_t s);
  void rethrow();
  const Plan& plan_;
  std::string staging_;
  Journal& journal_;
  std::vector<TensorRecord>& records_;
  std::vector<std::vector<int>> other_ranks_;  // per shard: the ranks besides 0 with a part
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_{false};
  std::exception_ptr failed_;
  std::vector<bool> open_, own_done_;
  std::thread looker_;
};

}  // namespace selq::pipeline::detail
