// In-place quantization with crash-safe resume (see quantize.h).
//
// Planning after a crash must see the *original* checkpoint, but some shards
// may already be rewritten. So the first run saves sparse, header-only copies
// of the original shards (same size, no data blocks) plus the original
// config.json and index in `.selq-inplace/orig/`; every run plans from those.
// Tensor data is read from the live shards, which are original until the
// rename that commits their replacement. What a run adopts, rewrites or
// refuses is decided in pipeline/in_place_decisions.h; this file gathers the
// facts and does the work.
#include <bit>
#include <chrono>
#include <optional>
#include <set>
#include <filesystem>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/error.h"
#include "export/dialect_read.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "pipeline/distribute.h"
#include "pipeline/in_place_decisions.h"
#include "pipeline/journal.h"
#include "pipeline/manifest.h"
#include "pipeline/quantize.h"
#include "pipeline/shard_writer.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

using namespace detail;

namespace {

// The first `n` bytes of a file (a safetensors length prefix and header).
std::string read_prefix(const std::string& path, std::uint64_t n) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw_io("cannot open", {path});
  std::string out(n, '\0');
  const ssize_t got = ::pread(fd, out.data(), n, 0);
  ::close(fd);
  if (got != static_cast<ssize_t>(n)) throw_io("short read of the header", {path, "", std::uint64_t{0}});
  return out;
}

// A file with the same size and header as `src` whose data section is a hole.
void write_sparse_header_copy(const std::string& src, const std::string& dst) {
  const auto file = io::SafetensorsFile::open(src);
  const std::string content = read_prefix(src, file->data_start());
  const std::string tmp = dst + ".selq-tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw_io("cannot create header copy", {tmp});
  const bool ok = ::write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()) &&
                  ::ftruncate(fd, static_cast<off_t>(file->file_size())) == 0 && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw_io("cannot write header copy", {tmp});
  fs::rename(tmp, dst);
}

// Saves what planning needs from the original checkpoint, once.
void save_original_headers(const io::Checkpoint& live, const std::string& orig_dir) {
  const std::string staging = orig_dir + ".selq-tmp";
  remove_all_quietly(staging);
  fs::create_directories(staging);
  for (const auto& shard : live.shards())
    write_sparse_header_copy((fs::path(live.dir()) / shard).string(), (fs::path(staging) / shard).string());
  // config.json, the index and a dialect's side file (ModelOpt's may carry the only config).
  std::vector<std::string> names = {"config.json", io::kIndexName};
  for (const auto& name : live.other_files())
    if (exporter::is_config_side_file(name)) names.push_back(name);
  for (const auto& name : names) {
    const fs::path p = fs::path(live.dir()) / name;
    if (fs::exists(p)) io::copy_file_atomic(p.string(), (fs::path(staging) / name).string());
  }
  io::fsync_dir(staging);
  fs::rename(staging, orig_dir);
  io::fsync_dir(fs::path(orig_dir).parent_path().string());
}

std::uint64_t free_bytes(const std::string& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0) throw_io("cannot stat the file system", {dir});
  return static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
}

// The manifest of a completed in-place run of this same recipe in `dir`, if
// any: re-running the command after it finished (or after it was killed
// during its final cleanup) has nothing left to do.
std::optional<std::string> finished_run_manifest(const std::string& dir, const recipe::Recipe& recipe) {
  const fs::path p = fs::path(dir) / kManifestName;
  if (!fs::exists(p)) return std::nullopt;
  std::string text = io::read_file(p.string());
  if (!is_finished_in_place_run(text, recipe)) return std::nullopt;
  return text;
}

// How one of this rank's shards is found: its journaled rewrite, or the
// original (then opened into `live`), or neither.
LiveShard find_live_shard(const PlannedShard& shard, const std::string& path, const Journal& journal,
                          const io::Checkpoint& original, const std::string& orig_dir,
                          std::map<std::string, std::unique_ptr<io::SafetensorsFile>>& live) {
  if (journal.resumed() && journal.is_committed(shard.name, path)) return LiveShard::Committed;
  auto file = io::SafetensorsFile::open(path);
  const auto& orig_file = original.shard_file(shard.name);
  if (file->file_size() != orig_file.file_size() || file->data_start() != orig_file.data_start() ||
      read_prefix(path, file->data_start()) !=
          read_prefix((fs::path(orig_dir) / shard.name).string(), orig_file.data_start()))
    return LiveShard::Neither;
  live[shard.name] = std::move(file);
  return LiveShard::Original;
}

// The journaled fused-group amax as text (raw float bits, exact), for the ranks.
std::string amax_text(const std::map<std::string, float>& amax) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : amax) j[k] = std::bit_cast<std::uint32_t>(v);
  return j.dump();
}

std::map<std::string, float> amax_from_text(const std::string& text) {
  std::map<std::string, float> out;
  const nlohmann::json j = nlohmann::json::parse(text);  // named: items() of a temporary would dangle
  for (const auto& [k, v] : j.items()) out[k] = std::bit_cast<float>(v.get<std::uint32_t>());
  return out;
}


// The run's working files under the checkpoint.
struct InPlacePaths {
  fs::path work;            // DIR/.selq-in-place: journal, original headers, final files
  std::string done_marker;  // `work` renamed: the run is finished
  std::string orig_dir;     // the original headers
};

InPlacePaths in_place_paths(const std::string& dir) {
  const fs::path work = fs::path(dir) / kInPlaceDir;
  return {work, work.string() + ".done", (work / "orig").string()};
}

// Rank 0: a finished run's manifest (nothing to do), or the original headers
// saved by the first run (`first_run`: nothing else is journaled yet).
std::string set_up_in_place(const std::string& dir, const recipe::Recipe& recipe, const InPlacePaths& p,
                            bool& first_run) {
  remove_all_quietly(p.done_marker);  // a finished run killed while cleaning up
  if (fs::exists(p.orig_dir)) return {};
  if (auto done = finished_run_manifest(dir, recipe)) return std::move(*done);
  const auto live = io::Checkpoint::open(dir);  // not a checkpoint: nothing created
  fs::create_directories(p.work);
  first_run = true;
  try {
    save_original_headers(*live, p.orig_dir);
  } catch (...) {
    remove_all_quietly(p.work.string());
    throw;
  }
  return {};
}

// Every check that can refuse the recipe runs here, before the first write;
// a refused first run leaves the directory exactly as it found it.
Plan plan_in_place(const io::Checkpoint& original, const recipe::Recipe& recipe, const PlanOptions& plan_options,
                   const std::string& dir, const InPlacePaths& p, bool first_run) {
  try {
    Plan plan = make_plan(original, recipe, plan_options);
    refuse_in_place_requantize(plan, dir);
    if (plan.needs_model_pass())
      throw_unsupported("rounding 'gptq' in place is not implemented; quantize to a new directory");
    plan.source = dir;
    return plan;
  } catch (const Error& e) {
    if (first_run) remove_all_quietly(p.work.string());
    // Planned on the saved headers: name the checkpoint the user gave.
    ErrorWhere where = e.where();
    if (where.file.starts_with(p.orig_dir)) where.file = dir + where.file.substr(p.orig_dir.size());
    throw Error(e.kind(), e.message(), where, e.hint());
  }
}

// Which of this rank's shards are left: the originals are opened (into
// `live`), the committed rewrites found.
std::vector<LiveShard> live_shards(const Plan& plan, const std::vector<int>& shard_rank, int rank,
                                   const std::string& dir, Journal& journal, const io::Checkpoint& original,
                                   const InPlacePaths& p,
                                   std::map<std::string, std::unique_ptr<io::SafetensorsFile>>& live) {
  std::vector<LiveShard> found(plan.shards.size(), LiveShard::OtherRank);
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    if (shard_rank[s] == rank)
      found[s] = find_live_shard(plan.shards[s], (fs::path(dir) / plan.shards[s].name).string(), journal, original,
                                 p.orig_dir, live);
  return found;
}

// This rank's shards: their tensors counted as its own (`mine`, progress),
// the committed ones adopted (records read back); returns those to rewrite.
std::vector<const PlannedShard*> claim_shards(const Plan& plan, const std::vector<ShardAction>& actions,
                                              const std::string& dir, Journal& journal, const QuantizeOptions& options,
                                              std::vector<TensorRecord>& records, Progress& progress,
                                              std::vector<bool>& mine) {
  std::vector<const PlannedShard*> todo;
  for (std::size_t s = 0; s < plan.shards.size(); ++s) {
    if (actions[s] == ShardAction::None) continue;
    const auto& shard = plan.shards[s];
    for (const auto i : shard.tensors) {
      mine[i] = true;
      progress.bytes_total += plan.tensors[i].in_bytes();
      ++progress.tensors_total;
    }
    if (actions[s] == ShardAction::Adopt)
      adopt_committed_shard(plan, shard, (fs::path(dir) / shard.name).string(), journal, records, progress, options);
    else
      todo.push_back(&shard);
  }
  return todo;
}

// Fused-group amax is fixed by the first run, while every shard is original:
// distributed, each rank's members' max, reduced, journaled by rank 0 before
// any rank rewrites a shard.
std::map<std::string, float> in_place_group_amax(dist::Ranks& ranks, Journal& journal, ThreadLimit& limit,
                                                 const TensorSource& source, const Plan& plan,
                                                 const std::vector<bool>& mine) {
  std::map<std::string, float> known;
  if (!dist::distributed()) {
    limit.run([&] { known = journaled_group_amax(journal, source, plan); });
    return known;
  }
  const bool lead = ranks.rank() == 0;
  const std::string text =
      ranks.broadcast_text(lead && journal.has_group_amax() ? amax_text(journal.group_amax()) : std::string());
  if (!text.empty()) return amax_from_text(text);
  std::set<std::string> groups;
  for (const auto& t : plan.tensors)
    if (!t.fused_group.empty()) groups.insert(t.fused_group);
  known = exchange_group_amax(ranks, limit, source, plan, {groups.begin(), groups.end()}, mine);
  if (lead) journal.set_group_amax(known);
  ranks.barrier();  // journaled before any shard is rewritten
  return known;
}

// Rank 0, after every shard: index and config.json last, the manifest and
// report with them, then one atomic rename marks the run finished (the
// cleanup after it may be interrupted).
std::string commit_in_place(const io::Checkpoint& original, const Plan& plan, const recipe::Recipe& recipe,
                            const std::vector<TensorRecord>& records, const std::string& dir, const InPlacePaths& p,
                            const QuantizeOptions& options) {
  const std::string final_dir = (p.work / "final").string();
  remove_all_quietly(final_dir);
  fs::create_directories(final_dir);
  std::string manifest = finalize_checkpoint(original, plan, recipe, records, final_dir, RunMode::InPlace);
  if (options.before_commit) options.before_commit(final_dir);
  for (const auto& e : fs::directory_iterator(final_dir)) fs::rename(e.path(), fs::path(dir) / e.path().filename());
  io::fsync_dir(dir);
  fs::rename(p.work, p.done_marker);
  io::fsync_dir(dir);
  remove_all_quietly(p.done_marker);
  return manifest;
}

}  // namespace

QuantizeResult run_quantize_in_place(const std::string& dir, const recipe::Recipe& recipe,
                                     const PlanOptions& plan_options, const QuantizeOptions& options,
                                     Plan* plan_out) {
  const auto start = std::chrono::steady_clock::now();
  require_memory_budget(options);
  if (plan_options.max_shard_bytes)
    throw_bad_input("an in-place run keeps the shard layout; a maximum shard size cannot be given with it", {dir});
  // Under mpirun each rank rewrites its shards (pipeline/distribute.h); rank 0
  // alone sets up, journals the fused-group amax and writes the files last.
  dist::Ranks& ranks = dist::ranks();
  const bool lead = ranks.rank() == 0;
  const InPlacePaths paths = in_place_paths(dir);
  bool first_run = false;
  std::string done_manifest = lead ? set_up_in_place(dir, recipe, paths, first_run) : std::string();
  done_manifest = ranks.broadcast_text(done_manifest);  // also: the headers are saved
  QuantizeResult result;
  if (!done_manifest.empty()) {
    result.manifest = std::move(done_manifest);
    result.already_done = true;
    return result;
  }
  const auto original = io::Checkpoint::open(paths.orig_dir);
  const Plan plan = plan_in_place(*original, recipe, plan_options, dir, paths, first_run);
  if (plan_out) *plan_out = plan;
  if (options.on_plan) options.on_plan(plan);

  Journal journal = open_rank_journal(
      ranks, paths.work.string(), kInPlaceJournalBase, plan_fingerprint(plan, recipe), [&](Journal& j) {
        // Before anything is written: no other recipe's run in progress, room for the rewrites.
        check_in_place_start(plan,
                             {j.resumed(), j.has_existing_with_other_fingerprint(),
                              journal_file(paths.work.string(), kInPlaceJournalBase, 0), free_bytes(dir), ranks.size()},
                             dir);
      });
  const std::vector<int> shard_rank = assign_shards(plan, ranks.size());

  // Live shard files are opened lazily, only for shards still to be done.
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> live;
  const TensorSource source{[&](const std::string& shard, const std::string& tensor) {
    auto it = live.find(shard);
    if (it == live.end()) throw Error(ErrorKind::Internal, "shard not opened", {shard, tensor});
    io::FetchedTensor f;
    f.view = it->second->view(tensor);
    return f;
  }, /*views_of_files=*/true, /*done=*/{}};

  ThreadLimit limit(options.threads);
  Progress progress;
  BufferPool pool;  // output buffers, reused across shards
  std::vector<TensorRecord> records(plan.tensors.size());
  std::vector<bool> mine(plan.tensors.size(), false);
  const std::vector<ShardAction> actions = in_place_shard_actions(
      plan, live_shards(plan, shard_rank, ranks.rank(), dir, journal, *original, paths, live), dir);
  const std::vector<const PlannedShard*> todo =
      claim_shards(plan, actions, dir, journal, options, records, progress, mine);
  GroupAmax group_amax(in_place_group_amax(ranks, journal, limit, source, plan, mine));
  limit.run([&] {
    for (const PlannedShard* shard : todo) {
      const std::string path = (fs::path(dir) / shard->name).string();
      in_shard(shard->name, [&] {
        write_shard(source, plan, *shard, path, options, group_amax, journal, records, progress, pool);
      });
      live.erase(shard->name);  // unmaps the old file, now unlinked
    }
  });
  const std::jthread unmapping = pool.unmap_in_background();
  gather_records(ranks, records, mine);
  if (lead) {
    result.manifest = commit_in_place(*original, plan, recipe, records, dir, paths, options);
    result.bytes_read = plan.source_bytes();
    result.bytes_written = plan.output_bytes();
  }
  ranks.barrier();  // rank 0 has written the files last
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace selq::pipeline
