#include "pipeline/quantize.h"

#include <chrono>
#include <filesystem>
#include <future>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/distribute.h"
#include "pipeline/journal.h"
#include "pipeline/manifest.h"
#include "pipeline/remote_reader.h"
#include "pipeline/shard_schedule.h"
#include "pipeline/shard_writer.h"
#include "pipeline/shared_shard.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

using namespace detail;

namespace {
// Downloads this rank's tensors ahead, in the order its shards read them, on
// as many connections as it has workers (the number `-j` sets), within half
// of the memory budget (the other half is the pipeline's).
std::unique_ptr<RemoteReader> start_remote_reader(const io::Checkpoint& src, const Plan& plan,
                                                  const std::vector<bool>& writes, ThreadLimit& limit,
                                                  const QuantizeOptions& options) {
  std::vector<std::string> order;
  for (const auto& shard : plan.shards)
    for (const auto i : shard.tensors) {
      if (!writes[i]) continue;
      const PlannedTensor& t = plan.tensors[i];
      if (t.stored)
        order.insert(order.end(), t.stored->tensors.begin(), t.stored->tensors.end());
      else
        order.push_back(t.source);
    }
  std::size_t connections = 1;
  limit.run([&] { connections = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()); });
  const std::uint64_t budget = options.memory_budget;
  const std::uint64_t window = (budget > kBudgetReserve ? budget - kBudgetReserve : budget) / 2;
  return std::make_unique<RemoteReader>(src, order, connections, window);
}
}  // namespace

QuantizeResult run_quantize(const io::Checkpoint& src, const Plan& plan, const recipe::Recipe& recipe,
                            const std::string& dst, const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  dist::Ranks& ranks = dist::ranks();
  const bool lead = ranks.rank() == 0;  // checks, and writes everything but the shards
  const std::string staging = staging_dir(dst);
  require_memory_budget(options);
  if (options.on_plan) options.on_plan(plan);
  std::error_code ec;
  if (lead) {
    if (fs::exists(dst) && !options.overwrite)
      throw_bad_input("destination exists", {dst}, ErrorHint::ReplaceOutput);
    // A staging directory from a run with another plan is stale: start over.
    if (fs::exists(staging) && !fs::exists(journal_file(staging, kJournalBase, 0))) remove_all_quietly(staging);
    fs::create_directories(staging, ec);
    if (ec) throw_io(fmt::format("cannot create staging directory: {}", ec.message()), {staging});
  }
  Journal journal = open_rank_journal(ranks, staging, kJournalBase, plan_fingerprint(plan, recipe), [&](Journal& j) {
    if (j.has_existing_with_other_fingerprint()) {
      // Different plan: discard the old staging content (only ours lives there).
      const std::string own = journal_file(staging, kJournalBase, 0);
      for (const auto& e : fs::directory_iterator(staging))
        if (e.path() != fs::path(own)) fs::remove_all(e.path(), ec);
    }
    // A killed run's unfinished shards are rewritten whole; split over
    // ranks, nobody truncates their shared temporary files, so they go now.
    remove_parts(staging);
  });

  ThreadLimit limit(options.threads);
  QuantizeResult result;
  // config.json, the index and the source's other files depend on the plan
  // alone: written on another thread while the shards are (the config's
  // engine self-check takes 1-3 s at 70,000 modules: docs/BENCHMARKS.md).
  // On an error in the shards the future's destructor waits for it.
  std::future<void> checkpoint_files;
  if (lead)
    checkpoint_files = std::async(std::launch::async, [&] {
      write_checkpoint_files(src, plan, staging, RunMode::FileToFile);
    });
  // This rank's work (by shard, or by tensor when whole shards would leave
  // it unbalanced), and the amax of the fused groups that span ranks: a max
  // over each rank's own members, exchanged before any member is written.
  const Assignment work = assign_work(plan, ranks.size(), options.split_by);
  const int rank = ranks.rank();
  // Shards an earlier run committed are adopted, not written (nor
  // downloaded): by the shard's rank, or, split by tensor, by rank 0 alone,
  // which tells the others (every rank hashing every committed shard would
  // read them all N times).
  std::vector<bool> adopted(plan.shards.size(), false);
  if (journal.resumed() && (!work.by_tensor || lead))
    for (std::size_t s = 0; s < plan.shards.size(); ++s)
      if (work.shard_rank[s] == rank)
        in_shard(plan.shards[s].name, [&] {
          adopted[s] = journal.is_committed(plan.shards[s].name, (fs::path(staging) / plan.shards[s].name).string());
        });
  if (work.by_tensor) {
    std::string flags;
    for (const bool a : adopted) flags += a ? '1' : '0';
    flags = ranks.broadcast_text(flags);
    for (std::size_t s = 0; s < plan.shards.size(); ++s) adopted[s] = flags.at(s) == '1';
  }
  // `writes`: the tensors this rank quantizes; `reports`: those whose records
  // it holds for rank 0 (also those of the shards it adopted).
  std::vector<bool> writes(plan.tensors.size(), false), reports(plan.tensors.size(), false);
  Progress progress;
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors) {
      writes[i] = !adopted[s] && work.tensor_rank[i] == rank;
      reports[i] = adopted[s] ? work.shard_rank[s] == rank : writes[i];
      if (reports[i]) {
        progress.bytes_total += plan.tensors[i].in_bytes();
        ++progress.tensors_total;
      }
    }
  std::unique_ptr<RemoteReader> reader;
  if (src.is_remote()) reader = start_remote_reader(src, plan, writes, limit, options);
  TensorSource source{[&](const std::string&, const std::string& tensor) {
                        return reader ? reader->fetch(tensor) : src.fetch(tensor);
                      },
                      !src.is_remote(), {}};
  if (reader) source.done = [&](const std::string& tensor) { reader->done(tensor); };
  std::map<std::string, float> exchanged;
  if (const auto groups = groups_across_ranks(plan, work.tensor_rank); !groups.empty()) {
    // Every member this rank is assigned, adopted or not: the amax is the whole group's.
    std::vector<bool> assigned(plan.tensors.size());
    for (std::size_t i = 0; i < plan.tensors.size(); ++i) assigned[i] = work.tensor_rank[i] == rank;
    exchanged = exchange_group_amax(ranks, limit, source, plan, groups, assigned);
  }
  BufferPool pool;  // output buffers, reused across shards
  GroupAmax group_amax(source, plan, std::move(exchanged));
  std::vector<TensorRecord> records(plan.tensors.size());
  std::vector<bool> open(plan.shards.size());
  for (std::size_t s = 0; s < plan.shards.size(); ++s) open[s] = !adopted[s];
  std::optional<SharedShardCommits> commits;
  if (work.by_tensor && lead) commits.emplace(plan, work.tensor_rank, staging, journal, open, records);
  limit.run([&] {
    for (std::size_t s = 0; s < plan.shards.size(); ++s) {
      const auto& shard = plan.shards[s];
      const std::string path = (fs::path(staging) / shard.name).string();
      if (adopted[s]) {
        if (work.shard_rank[s] == rank)
          in_shard(shard.name, [&] { adopt_committed_shard(plan, shard, path, journal, records, progress, options); });
        continue;
      }
      if (!work.by_tensor) {
        if (work.shard_rank[s] == rank)
          in_shard(shard.name, [&] {
            write_shard(source, plan, shard, path, options, group_amax, journal, records, progress, pool);
          });
        continue;
      }
      const PlannedShard part = part_of(shard, work.tensor_rank, rank);
      if (!part.tensors.empty())
        in_shard(shard.name, [&] {
          const ShardRecords mine =
              write_shard_part(source, plan, shard, part, path, options, group_amax, records, progress, pool);
          if (!lead) write_part_records(staging, shard.name, rank, mine);
        });
      if (commits) commits->own_part_done(s);
    }
  });
  const std::jthread unmapping = pool.unmap_in_background();
  if (commits) commits->stop();  // the gather writes the records it fills
  gather_records(ranks, records, reports);
  if (!lead) {
    ranks.barrier();  // rank 0 has published `dst`
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }
  if (commits) commits->commit_rest();
  checkpoint_files.get();
  result.manifest = write_manifest_and_report(plan, recipe, records, staging, RunMode::FileToFile);
  if (options.before_commit) options.before_commit(staging);
  remove_journals(staging, kJournalBase);

  // Publish: the staged directory becomes `dst` in one rename. An existing
  // destination (only with --force) is moved aside first and removed after.
  const std::string old = dst + ".selq-old";
  if (fs::exists(dst)) {
    remove_all_quietly(old);
    fs::rename(dst, old, ec);
    if (ec) throw_io(fmt::format("cannot move the old destination aside: {}", ec.message()), {dst});
  }
  fs::rename(staging, dst, ec);
  if (ec) throw_io(fmt::format("cannot rename the staged output into place: {}", ec.message()), {dst});
  io::fsync_dir(fs::absolute(dst).parent_path().string());
  remove_all_quietly(old);
  ranks.barrier();

  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.bytes_read = plan.source_bytes();
  result.bytes_written = plan.output_bytes();
  if (ranks.size() > 1) result.split_by = work.by_tensor ? "tensor" : "shard";
  return result;
}

QuantizeResult quantize(const QuantizeJob& job, const QuantizeOptions& options, Plan* plan_out) {
  if (job.in_place == !job.destination.empty())
    throw_bad_input(job.in_place ? "an in-place run takes no destination" : "missing destination (or in place)");
  if (job.in_place && options.split_by == "tensor")
    throw_unsupported("splitting by tensor is file to file only (in place, each rank rewrites whole shards)");
  if (job.must_resume && dist::ranks().rank() == 0 &&
      interrupted_run(job.source, job.destination, job.in_place).empty())
    throw_bad_input("nothing to resume (no interrupted run found)",
                    {job.in_place ? job.source : staging_dir(job.destination)});
  if (job.in_place) return run_quantize_in_place(job.source, job.recipe, job.plan_options, options, plan_out);
  const auto source = io::Checkpoint::open(job.source);
  Plan plan = make_plan(*source, job.recipe, job.plan_options);
  QuantizeOptions run_options = options;
  if (plan.rounds_gptq()) {
    if (dist::ranks().size() > 1)
      throw_unsupported("rounding 'gptq' runs the model on one process; run it without mpirun");
    if (!options.round_weights)
      throw_unsupported("rounding 'gptq' needs the model run layer by layer, which `selq quantize` and "
                        "selq.quantize do");
    run_options.rounded = options.round_weights(*source, plan);
    plan.rounded_fingerprint = run_options.rounded->fingerprint();
    plan.gptq_calibration = run_options.rounded->provenance();
  }
  QuantizeResult result = run_quantize(*source, plan, job.recipe, job.destination, run_options);
  if (plan_out) *plan_out = std::move(plan);
  return result;
}

std::string staging_dir(const std::string& dst) { return dst + ".selq-partial"; }

std::string interrupted_run(const std::string& dir, const std::string& dst, bool in_place) {
  const std::string marker = in_place ? (fs::path(dir) / kInPlaceDir).string()
                                      : journal_file(staging_dir(dst), kJournalBase, 0);
  return fs::exists(marker) ? marker : "";
}

}  // namespace selq::pipeline
