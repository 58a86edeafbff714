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

// One file-to-file run on this rank: staging, the journal, this rank's share
// of the shards, and (rank 0) the commit into `dst`.
class FileToFileRun {
 public:
  FileToFileRun(const io::Checkpoint& src, const Plan& plan, const recipe::Recipe& recipe, const std::string& dst,
                const QuantizeOptions& options)
      : src_(src), plan_(plan), recipe_(recipe), dst_(dst), options_(options), ranks_(dist::ranks()),
        lead_(ranks_.rank() == 0), rank_(ranks_.rank()), staging_(staging_dir(dst)), limit_(options.threads) {}

  QuantizeResult run() {
    const auto start = std::chrono::steady_clock::now();
    require_memory_budget(options_);
    if (options_.on_plan) options_.on_plan(plan_);
    if (lead_) prepare_staging();
    Journal journal = open_journal();
    // config.json, the index and the source's other files depend on the plan
    // alone: written on another thread while the shards are (the config's
    // engine self-check takes seconds at 70,000 modules). On an error in the
    // shards the future's destructor waits for it.
    std::future<void> checkpoint_files;
    if (lead_)
      checkpoint_files = std::async(std::launch::async, [&] {
        write_checkpoint_files(src_, plan_, staging_, RunMode::FileToFile);
      });
    // This rank's work (by shard, or by tensor when whole shards would leave
    // it unbalanced).
    work_ = assign_work(plan_, ranks_.size(), options_.split_by);
    find_adopted(journal);
    choose_tensors();
    open_source();
    write_shards(journal);
    QuantizeResult result;
    if (lead_) {
      checkpoint_files.get();
      result.manifest = write_manifest_and_report(plan_, recipe_, records_, staging_, RunMode::FileToFile);
      if (options_.before_commit) options_.before_commit(staging_);
      remove_journals(staging_, kJournalBase);
      publish();
      result.bytes_read = plan_.source_bytes();
      result.bytes_written = plan_.output_bytes();
      if (ranks_.size() > 1) result.split_by = work_.by_tensor ? "tensor" : "shard";
    }
    ranks_.barrier();  // rank 0 has published `dst`
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
  }

 private:
  // The destination is new (or --force); a staging directory from a run with
  // another plan is stale: start over.
  void prepare_staging() const {
    if (fs::exists(dst_) && !options_.overwrite) throw_bad_input("destination exists", {dst_}, ErrorHint::ReplaceOutput);
    if (fs::exists(staging_) && !fs::exists(journal_file(staging_, kJournalBase, 0))) remove_all_quietly(staging_);
    std::error_code ec;
    fs::create_directories(staging_, ec);
    if (ec) throw_io(fmt::format("cannot create staging directory: {}", ec.message()), {staging_});
  }

  Journal open_journal() const {
    return open_rank_journal(ranks_, staging_, kJournalBase, plan_fingerprint(plan_, recipe_), [&](Journal& j) {
      std::error_code ec;
      if (j.has_existing_with_other_fingerprint()) {
        // Different plan: discard the old staging content (only ours lives there).
        const std::string own = journal_file(staging_, kJournalBase, 0);
        for (const auto& e : fs::directory_iterator(staging_))
          if (e.path() != fs::path(own)) fs::remove_all(e.path(), ec);
      }
      // A killed run's unfinished shards are rewritten whole; split over
      // ranks, nobody truncates their shared temporary files, so they go now.
      remove_parts(staging_);
    });
  }

  // Shards an earlier run committed are adopted, not written (nor
  // downloaded): by the shard's rank, or, split by tensor, by rank 0 alone,
  // which tells the others (every rank hashing every committed shard would
  // read them all N times).
  void find_adopted(Journal& journal) {
    adopted_.assign(plan_.shards.size(), false);
    if (journal.resumed() && (!work_.by_tensor || lead_))
      for (std::size_t s = 0; s < plan_.shards.size(); ++s)
        if (work_.shard_rank[s] == rank_)
          in_shard(plan_.shards[s].name, [&] {
            adopted_[s] =
                journal.is_committed(plan_.shards[s].name, (fs::path(staging_) / plan_.shards[s].name).string());
          });
    if (!work_.by_tensor) return;
    std::string flags;
    for (const bool a : adopted_) flags += a ? '1' : '0';
    flags = ranks_.broadcast_text(flags);
    for (std::size_t s = 0; s < plan_.shards.size(); ++s) adopted_[s] = flags.at(s) == '1';
  }

  // `writes_`: the tensors this rank quantizes; `reports_`: those whose
  // records it holds for rank 0 (also those of the shards it adopted).
  void choose_tensors() {
    writes_.assign(plan_.tensors.size(), false);
    reports_.assign(plan_.tensors.size(), false);
    for (std::size_t s = 0; s < plan_.shards.size(); ++s)
      for (const auto i : plan_.shards[s].tensors) {
        writes_[i] = !adopted_[s] && work_.tensor_rank[i] == rank_;
        reports_[i] = adopted_[s] ? work_.shard_rank[s] == rank_ : writes_[i];
        if (reports_[i]) {
          progress_.bytes_total += plan_.tensors[i].in_bytes();
          ++progress_.tensors_total;
        }
      }
  }

  // Where tensors come from (a remote source downloads ahead), and the amax of
  // the fused groups that span ranks: a max over each rank's own members,
  // exchanged before any member is written.
  void open_source() {
    if (src_.is_remote()) reader_ = start_remote_reader(src_, plan_, writes_, limit_, options_);
    source_ = TensorSource{[this](const std::string&, const std::string& tensor) {
                             return reader_ ? reader_->fetch(tensor) : src_.fetch(tensor);
                           },
                           !src_.is_remote(), {}};
    if (reader_) source_.done = [this](const std::string& tensor) { reader_->done(tensor); };
    std::map<std::string, float> exchanged;
    if (const auto groups = groups_across_ranks(plan_, work_.tensor_rank); !groups.empty()) {
      // Every member this rank is assigned, adopted or not: the amax is the whole group's.
      std::vector<bool> assigned(plan_.tensors.size());
      for (std::size_t i = 0; i < plan_.tensors.size(); ++i) assigned[i] = work_.tensor_rank[i] == rank_;
      exchanged = exchange_group_amax(ranks_, limit_, source_, plan_, groups, assigned);
    }
    group_amax_.emplace(source_, plan_, std::move(exchanged));
  }

  // This rank's shards (or parts of shards), then every record gathered on
  // rank 0 and the shards split by tensor committed.
  void write_shards(Journal& journal) {
    records_.assign(plan_.tensors.size(), TensorRecord{});
    std::vector<bool> open(plan_.shards.size());
    for (std::size_t s = 0; s < plan_.shards.size(); ++s) open[s] = !adopted_[s];
    std::optional<SharedShardCommits> commits;
    if (work_.by_tensor && lead_) commits.emplace(plan_, work_.tensor_rank, staging_, journal, open, records_);
    limit_.run([&] {
      for (std::size_t s = 0; s < plan_.shards.size(); ++s) {
        write_shard_share(s, journal);
        if (commits && !adopted_[s] && work_.by_tensor) commits->own_part_done(s);
      }
    });
    unmapping_ = pool_.unmap_in_background();  // joined when the run ends
    if (commits) commits->stop();  // the gather writes the records it fills
    gather_records(ranks_, records_, reports_);
    if (commits) commits->commit_rest();
  }

  // Shard s: adopted as committed, written whole, or this rank's part of it.
  void write_shard_share(std::size_t s, Journal& journal) {
    const auto& shard = plan_.shards[s];
    const std::string path = (fs::path(staging_) / shard.name).string();
    if (adopted_[s]) {
      if (work_.shard_rank[s] == rank_)
        in_shard(shard.name, [&] { adopt_committed_shard(plan_, shard, path, journal, records_, progress_, options_); });
      return;
    }
    if (!work_.by_tensor) {
      if (work_.shard_rank[s] == rank_)
        in_shard(shard.name, [&] {
          write_shard(source_, plan_, shard, path, options_, *group_amax_, journal, records_, progress_, pool_);
        });
      return;
    }
    const PlannedShard part = part_of(shard, work_.tensor_rank, rank_);
    if (part.tensors.empty()) return;
    in_shard(shard.name, [&] {
      const ShardRecords mine =
          write_shard_part(source_, plan_, shard, part, path, options_, *group_amax_, records_, progress_, pool_);
      if (!lead_) write_part_records(staging_, shard.name, rank_, mine);
    });
  }

  // The staged directory becomes `dst` in one rename. An existing destination
  // (only with --force) is moved aside first and removed after.
  void publish() const {
    std::error_code ec;
    const std::string old = dst_ + ".selq-old";
    if (fs::exists(dst_)) {
      remove_all_quietly(old);
      fs::rename(dst_, old, ec);
      if (ec) throw_io(fmt::format("cannot move the old destination aside: {}", ec.message()), {dst_});
    }
    fs::rename(staging_, dst_, ec);
    if (ec) throw_io(fmt::format("cannot rename the staged output into place: {}", ec.message()), {dst_});
    io::fsync_dir(fs::absolute(dst_).parent_path().string());
    remove_all_quietly(old);
  }

  const io::Checkpoint& src_;
  const Plan& plan_;
  const recipe::Recipe& recipe_;
  const std::string& dst_;
  const QuantizeOptions& options_;
  dist::Ranks& ranks_;
  const bool lead_;  // checks, and writes everything but the shards
  const int rank_;
  const std::string staging_;
  ThreadLimit limit_;
  Assignment work_;
  std::vector<bool> adopted_, writes_, reports_;
  Progress progress_;
  std::unique_ptr<RemoteReader> reader_;
  TensorSource source_;
  std::optional<GroupAmax> group_amax_;
  std::vector<TensorRecord> records_;
  BufferPool pool_;           // output buffers, reused across shards
  std::jthread unmapping_;    // declared after pool_: joined before it goes
};

}  // namespace

QuantizeResult run_quantize(const io::Checkpoint& src, const Plan& plan, const recipe::Recipe& recipe,
                            const std::string& dst, const QuantizeOptions& options) {
  return FileToFileRun(src, plan, recipe, dst, options).run();
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
  QuantizeResult result = quantize_planned(*source, plan, job.recipe, job.destination, options);
  if (plan_out) *plan_out = std::move(plan);
  return result;
}

QuantizeResult quantize_planned(const io::Checkpoint& source, Plan& plan, const recipe::Recipe& recipe,
                                const std::string& dst, const QuantizeOptions& options) {
  QuantizeOptions run_options = options;
  if (plan.needs_model_pass()) {
    if (!options.round_weights)
      throw_unsupported("rounding 'gptq' needs the model run layer by layer, which `selq quantize` and "
                        "selq.quantize do");
    run_options.rounded = options.round_weights(source, plan);
    plan.rounded_fingerprint = run_options.rounded->fingerprint();
    plan.gptq_calibration = run_options.rounded->provenance();
  }
  return run_quantize(source, plan, recipe, dst, run_options);
}

std::string staging_dir(const std::string& dst) { return dst + ".selq-partial"; }

std::string interrupted_run(const std::string& dir, const std::string& dst, bool in_place) {
  const std::string marker = in_place ? (fs::path(dir) / kInPlaceDir).string()
                                      : journal_file(staging_dir(dst), kJournalBase, 0);
  return fs::exists(marker) ? marker : "";
}

}  // namespace selq::pipeline
