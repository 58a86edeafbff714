#pragma once
// How a run's shards are shared among ranks (dist/ranks.h) and what the
// ranks exchange: the fused-group amax whose members sit on several ranks,
// and each rank's tensor records for rank 0's manifest.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "dist/ranks.h"
#include "pipeline/journal.h"
#include "pipeline/manifest.h"
#include "pipeline/plan.h"

namespace selq::pipeline::detail {

// The rank of each planned shard (dist::assign_largest_first by source +
// output bytes). One rank gets them all.
std::vector<int> assign_shards(const Plan& plan, int ranks);

// Who writes what. By shard: each shard whole on one rank (its own file,
// journal and rename). By tensor, when there are fewer shards than ranks or
// spreading tensors would lighten the heaviest rank by more than 1/128 of its
// share (distribute.cpp): each shard's tensors are spread over the ranks, which all
// pwrite into the shard's one temporary file; rank 0 commits it
// (pipeline/shared_shard.h). The unit spread is a tensor, or the members of
// an NVFP4 fused group within the shard together (split, each rank would
// read the others' members for the group amax: a second pass over them).
struct Assignment {
  bool by_tensor{false};
  std::vector<int> shard_rank;   // by shard: its rank; by tensor: 0, the rank that commits it
  std::vector<int> tensor_rank;  // the rank that quantizes each plan tensor
};
// `split_by`: "auto" (as above), or "shard" / "tensor" to choose.
Assignment assign_work(const Plan& plan, int ranks, const std::string& split_by = "auto");
// By tensor: each shard's units, shard after shard, largest first onto the
// least-loaded rank counting all earlier shards (dist::assign_largest_first
// with loads), so the ranks' totals differ by at most one unit.
std::vector<int> assign_tensors(const Plan& plan, int ranks);

// The NVFP4 fused groups with members on different ranks (by plan tensor).
std::vector<std::string> groups_across_ranks(const Plan& plan, const std::vector<int>& tensor_rank);

struct TensorSource;  // pipeline/shard_writer.h
struct ThreadLimit;
// The amax of each fused group in `groups` (sorted) over its members on every
// rank: each rank reads its own members (`mine`, by plan tensor) and the
// ranks reduce with a max, so all get the same values.
std::map<std::string, float> exchange_group_amax(dist::Ranks& ranks, ThreadLimit& limit, const TensorSource& source,
                                                 const Plan& plan, const std::vector<std::string>& groups,
                                                 const std::vector<bool>& mine);

// Each rank's records (by plan index) as text, gathered into rank 0's `records`.
void gather_records(dist::Ranks& ranks, std::vector<TensorRecord>& records, const std::vector<bool>& mine);

// The journal file of a rank in `dir`: rank 0's is the one a single-process
// run keeps, so a rerun with any rank count finds it; all are read on resume.
constexpr const char* kJournalBase = ".selq-journal";  // file to file, in the staging directory
constexpr const char* kInPlaceJournalBase = "journal";   // in place, in .selq-inplace/
std::string journal_file(const std::string& dir, const std::string& base, int rank);
std::vector<std::string> journal_files(const std::string& dir, const std::string& base);
// Every rank's journal in `dir`, for both quantize modes: rank 0 opens its
// own and runs `lead_checks` on it (which may throw before anything is
// written); the others open theirs once rank 0 is through.
Journal open_rank_journal(dist::Ranks& ranks, const std::string& dir, const std::string& base,
                          const std::string& fingerprint, const std::function<void(Journal&)>& lead_checks);
// Removes every rank's journal and any temporary copy a killed rank left of one
// (a rerun with fewer ranks never rewrites, and so never consumes, that one).
void remove_journals(const std::string& dir, const std::string& base);

// Runs one shard's work; distributed, a failure names the shard (and the
// CLI's line the rank, dist::rank_prefix): the source file an error names
// does not say which rank's part of the run failed.
template <class F>
void in_shard(const std::string& shard, F&& f) {
  if (!dist::distributed()) return f();
  try {
    f();
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("shard {}: {}", shard, format_error(e.kind(), e.message(), e.where())), {},
                e.hint());
  }
}

}  // namespace selq::pipeline::detail
