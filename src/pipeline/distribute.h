#pragma once
// How a run's shards are shared among ranks (dist/ranks.h) and what the
// ranks exchange: the fused-group amax whose members sit on several ranks,
// and each rank's tensor records for rank 0's manifest.
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "dist/ranks.h"
#include "pipeline/manifest.h"
#include "pipeline/plan.h"

namespace selq::pipeline::detail {

// The rank of each planned shard (dist::assign_largest_first by source +
// output bytes). One rank gets them all.
std::vector<int> assign_shards(const Plan& plan, int ranks);

// The NVFP4 fused groups with members in shards of different ranks.
std::vector<std::string> groups_across_ranks(const Plan& plan, const std::vector<int>& shard_rank);

// Each rank's records (by plan index) as text, gathered into rank 0's `records`.
void gather_records(dist::Ranks& ranks, std::vector<TensorRecord>& records, const std::vector<bool>& mine);

// The journal file of a rank in `dir`: rank 0's is the one a single-process
// run keeps, so a rerun with any rank count finds it; all are read on resume.
constexpr const char* kJournalBase = ".selq-journal";  // file to file, in the staging directory
constexpr const char* kInPlaceJournalBase = "journal";   // in place, in .selq-inplace/
std::string journal_file(const std::string& dir, const std::string& base, int rank);
std::vector<std::string> journal_files(const std::string& dir, const std::string& base);
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
    throw Error(e.kind(), fmt::format("shard {}: {}", shard, format_error(e.kind(), e.message(), e.where())));
  }
}

}  // namespace selq::pipeline::detail
