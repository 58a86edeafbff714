#include "pipeline/quantize.h"

#include <chrono>
#include <filesystem>
#include <future>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "pipeline/journal.h"
#include "pipeline/manifest.h"
#include "pipeline/shard_writer.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

using namespace detail;

QuantizeResult run_quantize(const io::Checkpoint& src, const Plan& plan, const recipe::Recipe& recipe,
                            const std::string& dst, const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (fs::exists(dst) && !options.overwrite)
    throw_bad_input("destination exists (pass --force to replace it)", {dst});
  const std::string staging = dst + ".selq-partial";
  const std::string journal_path = (fs::path(staging) / ".selq-journal.json").string();
  std::error_code ec;
  // A staging directory from a run with another plan is stale: start over.
  if (fs::exists(staging) && !fs::exists(journal_path)) remove_all_quietly(staging);
  fs::create_directories(staging, ec);
  if (ec) throw_io(fmt::format("cannot create staging directory: {}", ec.message()), {staging});

  ThreadLimit limit(options.threads);
  limit.run(start_workers_early);
  const TensorSource source{[&src](const std::string&, const std::string& tensor) { return src.fetch(tensor); },
                            !src.is_remote()};
  QuantizeResult result;
  Journal journal(journal_path, plan_fingerprint(plan, recipe));
  if (journal.has_existing_with_other_fingerprint()) {
    // Different plan: discard the old staging content (only ours lives there).
    for (const auto& e : fs::directory_iterator(staging))
      if (e.path().filename() != ".selq-journal.json") fs::remove_all(e.path(), ec);
  }
  // config.json, the index and the source's other files depend on the plan
  // alone: written on another thread while the shards are, rather than after
  // the last one (8 ms of a 0.3 s run, with the engine-resolution self-check).
  // On an error in the shards the future's destructor waits for it.
  std::future<void> checkpoint_files = std::async(std::launch::async, [&] {
    write_checkpoint_files(src, plan, staging, RunMode::FileToFile);
  });
  Progress progress;
  BufferPool pool;  // output buffers, reused across shards
  progress.bytes_total = plan.source_bytes();
  progress.tensors_total = plan.tensors.size();
  GroupAmax group_amax(source, plan);
  std::vector<TensorRecord> records(plan.tensors.size());
  limit.run([&] {
    for (const auto& shard : plan.shards) {
      const std::string path = (fs::path(staging) / shard.name).string();
      if (journal.resumed() && journal.is_committed(shard.name, path)) {
        adopt_committed_shard(plan, shard, path, journal, records, progress, options);
        continue;
      }
      write_shard(source, plan, shard, path, options, group_amax, journal, records, progress, pool);
    }
  });
  const std::jthread unmapping = pool.unmap_in_background();
  checkpoint_files.get();
  result.manifest = write_manifest_and_report(plan, recipe, records, staging, RunMode::FileToFile);
  if (options.before_commit) options.before_commit(staging);
  fs::remove(journal_path, ec);

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

  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.bytes_read = plan.source_bytes();
  result.bytes_written = plan.output_bytes();
  return result;
}

}  // namespace selq::pipeline
