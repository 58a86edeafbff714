// In-place quantization with crash-safe resume (see quantize.h).
//
// Planning after a crash must see the *original* checkpoint, but some shards
// may already be rewritten. So the first run saves sparse, header-only copies
// of the original shards (same size, no data blocks) plus the original
// config.json and index in `.selq-inplace/orig/`; every run plans from those.
// Tensor data is read from the live shards, which are original until the
// rename that commits their replacement.
#include <chrono>
#include <filesystem>

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
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
  for (const char* name : {"config.json", io::kIndexName}) {
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
  nlohmann::json m = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.value("in_place", false) || !m.contains("recipe")) return std::nullopt;
  if (m["recipe"].value("text", "") != recipe.text || m.value("selq_version", "") != SELQ_VERSION) return std::nullopt;
  return text;
}

}  // namespace

QuantizeResult run_quantize_in_place(const std::string& dir, const recipe::Recipe& recipe,
                                     const PlanOptions& plan_options, const QuantizeOptions& options,
                                     Plan* plan_out) {
  const auto start = std::chrono::steady_clock::now();
  if (plan_options.max_shard_bytes)
    throw_bad_input("--in-place keeps the shard layout; --max-shard-size cannot be used with it", {dir});
  const fs::path work = fs::path(dir) / kInPlaceDir;
  const std::string done_marker = work.string() + ".done";
  remove_all_quietly(done_marker);  // a finished run killed while cleaning up
  const std::string orig_dir = (work / "orig").string();
  if (!fs::exists(orig_dir)) {
    if (auto done = finished_run_manifest(dir, recipe)) {
      QuantizeResult result;
      result.manifest = std::move(*done);
      result.already_done = true;
      return result;
    }
    fs::create_directories(work);
    save_original_headers(*io::Checkpoint::open(dir), orig_dir);
  }
  const auto original = io::Checkpoint::open(orig_dir);
  Plan plan = make_plan(*original, recipe, plan_options);
  // A re-quantized module's inputs may span shards that are rewritten at
  // different times; only file-to-file runs support it for now.
  for (const auto& t : plan.tensors)
    if (t.stored)
      throw_unsupported("re-quantizing pre-quantized modules (requantize: true) is supported file-to-file only, "
                        "not --in-place",
                        {dir, t.source});
  plan.source = dir;
  if (plan_out) *plan_out = plan;

  Journal journal((work / "journal.json").string(), plan_fingerprint(plan, recipe));
  if (journal.has_existing_with_other_fingerprint() && !journal.resumed())
    throw_bad_input(
        "an interrupted in-place run with a different recipe or selq version is in progress here; "
        "re-run it with its original recipe to finish it",
        {(work / "journal.json").string()});

  // Live shard files are opened lazily, only for shards still to be done.
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> live;
  const TensorSource source{[&](const std::string& shard, const std::string& tensor) {
    auto it = live.find(shard);
    if (it == live.end()) throw Error(ErrorKind::Internal, "shard not opened", {shard, tensor});
    io::FetchedTensor f;
    f.view = it->second->view(tensor);
    return f;
  }, /*views_of_files=*/true};

  // Check the space for one shard before anything is written.
  const std::uint64_t need = plan.largest_output_shard_bytes();
  const std::uint64_t have = free_bytes(dir);
  if (have < need + (16u << 20))
    throw_io(fmt::format("not enough free space for an in-place run: one rewritten shard needs up to {} bytes, "
                         "{} are free",
                         need, have),
             {dir});

  ThreadLimit limit(options.threads);
  limit.run(start_workers_early);
  Progress progress;
  BufferPool pool;  // output buffers, reused across shards
  progress.bytes_total = plan.source_bytes();
  progress.tensors_total = plan.tensors.size();
  std::vector<TensorRecord> records(plan.tensors.size());

  // Which shards are left, and open them (checking they are the originals).
  std::vector<const PlannedShard*> todo;
  for (const auto& shard : plan.shards) {
    const std::string path = (fs::path(dir) / shard.name).string();
    if (journal.resumed() && journal.is_committed(shard.name, path)) {
      adopt_committed_shard(plan, shard, path, journal, records, progress, options);
      continue;
    }
    auto file = io::SafetensorsFile::open(path);
    const auto& orig_file = original->shard_file(shard.name);
    if (file->file_size() != orig_file.file_size() || file->data_start() != orig_file.data_start() ||
        read_prefix(path, file->data_start()) !=
            read_prefix((fs::path(orig_dir) / shard.name).string(), orig_file.data_start()))
      throw_bad_input("shard is neither the original nor the journaled rewrite; refusing to continue", {path});
    live[shard.name] = std::move(file);
    todo.push_back(&shard);
  }
  // Fused-group amax is fixed by the first run, while every shard is original.
  std::map<std::string, float> known_amax;
  limit.run([&] { known_amax = journaled_group_amax(journal, source, plan); });
  GroupAmax group_amax(std::move(known_amax));

  limit.run([&] {
    for (const PlannedShard* shard : todo) {
      const std::string path = (fs::path(dir) / shard->name).string();
      write_shard(source, plan, *shard, path, options, group_amax, journal, records, progress, pool);
      live.erase(shard->name);  // unmaps the old file, now unlinked
    }
  });

  // Index and config.json last; the manifest and report with them.
  const std::string final_dir = (work / "final").string();
  remove_all_quietly(final_dir);
  fs::create_directories(final_dir);
  QuantizeResult result;
  const std::jthread unmapping = pool.unmap_in_background();
  result.manifest = finalize_checkpoint(*original, plan, recipe, records, final_dir, RunMode::InPlace);
  if (options.before_commit) options.before_commit(final_dir);
  for (const auto& e : fs::directory_iterator(final_dir)) {
    fs::rename(e.path(), fs::path(dir) / e.path().filename());
  }
  io::fsync_dir(dir);
  // One atomic rename marks the run finished; the cleanup after it may be interrupted.
  fs::rename(work, done_marker);
  io::fsync_dir(dir);
  remove_all_quietly(done_marker);

  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.bytes_read = plan.source_bytes();
  result.bytes_written = plan.output_bytes();
  return result;
}

}  // namespace selq::pipeline
