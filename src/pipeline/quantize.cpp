#include "pipeline/quantize.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>

#include <fmt/format.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>
#include <xxhash.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "pipeline/manifest.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

namespace {

// Output bytes of one planned tensor while it is in flight. Kept and
// passed-through tensors are views of the source mapping (no copy).
struct InFlight {
  std::size_t index{0};
  std::vector<std::vector<std::uint8_t>> buffers;   // quantized outputs
  std::vector<std::span<const std::uint8_t>> views; // what to write, one per output
  TensorRecord record;
};

std::uint64_t xxh3(std::span<const std::uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

// NVFP4 members of a fused group (q/k/v, gate/up, w1/w3) share one global
// scale: the max amax of the members (= the min of the compressed-tensors
// global scales, which is what llm-compressor writes and what vLLM's fused
// loader needs to be exact).
std::map<std::string, float> fused_global_amax(const io::Checkpoint& src, const Plan& plan) {
  std::vector<std::size_t> members;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    if (!plan.tensors[i].fused_group.empty()) members.push_back(i);
  std::vector<float> amax(members.size());
  tbb::parallel_for(std::size_t{0}, members.size(), [&](std::size_t k) {
    amax[k] = quant::tensor_amax(src.view(plan.tensors[members[k]].source));
  });
  std::map<std::string, float> out;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const auto& g = plan.tensors[members[k]].fused_group;
    out[g] = std::max(out.count(g) ? out[g] : 0.0f, amax[k]);
  }
  return out;
}

void produce(const io::Checkpoint& src, const PlannedTensor& t, const QuantizeOptions& options,
             const std::map<std::string, float>& group_amax, InFlight& f) {
  const TensorView in = src.view(t.source);
  f.record.source = t.source;
  f.record.source_hash = xxh3(in.bytes);
  if (!t.scheme) {
    f.views.push_back(in.bytes);
    f.record.output_hashes.push_back(f.record.source_hash);
    return;
  }
  f.buffers.resize(t.outputs.size());
  std::vector<std::span<std::uint8_t>> outs;
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    f.buffers[k].assign(t.outputs[k].info.nbytes(), 0);
    outs.push_back(f.buffers[k]);
  }
  quant::QuantizeOptions qo;
  qo.reject_non_finite = !options.allow_non_finite;
  if (!t.fused_group.empty()) qo.global_amax = group_amax.at(t.fused_group);
  quant::ErrorMetrics metrics;
  quant::quantize_weight(*t.scheme, in, outs, metrics, qo);
  f.record.metrics = metrics;
  for (auto& b : f.buffers) {
    f.views.push_back(b);
    f.record.output_hashes.push_back(xxh3(b));
  }
}

void write_shard(const io::Checkpoint& src, const Plan& plan, const PlannedShard& shard,
                 const std::string& staging, const QuantizeOptions& options,
                 const std::map<std::string, float>& group_amax, std::vector<TensorRecord>& records,
                 Progress& progress) {
  std::vector<TensorInfo> infos;
  for (auto i : shard.tensors)
    for (const auto& o : plan.tensors[i].outputs) infos.push_back(o.info);
  io::SafetensorsWriter writer((fs::path(staging) / shard.name).string(), infos, {{"format", "pt"}});

  // Tokens in flight bound the memory: at most ~2 tensors per worker.
  const std::size_t tokens = 2 * static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  std::size_t next = 0;
  tbb::parallel_pipeline(
      tokens,
      tbb::make_filter<void, InFlight*>(tbb::filter_mode::serial_in_order,
                                        [&](tbb::flow_control& fc) -> InFlight* {
                                          if (next == shard.tensors.size()) {
                                            fc.stop();
                                            return nullptr;
                                          }
                                          auto* f = new InFlight;
                                          f->index = shard.tensors[next++];
                                          return f;
                                        }) &
          tbb::make_filter<InFlight*, InFlight*>(tbb::filter_mode::parallel,
                                                 [&](InFlight* f) {
                                                   produce(src, plan.tensors[f->index], options, group_amax, *f);
                                                   return f;
                                                 }) &
          tbb::make_filter<InFlight*, void>(tbb::filter_mode::serial_in_order, [&](InFlight* f) {
            std::unique_ptr<InFlight> owned(f);
            const auto& t = plan.tensors[f->index];
            for (std::size_t k = 0; k < t.outputs.size(); ++k) writer.write(t.outputs[k].info.name, f->views[k]);
            records[f->index] = std::move(f->record);
            progress.bytes_done += t.in_bytes();
            ++progress.tensors_done;
            if (options.on_progress) options.on_progress(progress);
          }));
  writer.commit();
}

void remove_all_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

}  // namespace

QuantizeResult run_quantize(const io::Checkpoint& src, const Plan& plan, const recipe::Recipe& recipe,
                            const std::string& dst, const QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (fs::exists(dst) && !options.overwrite)
    throw_bad_input("destination exists (pass --force to replace it)", {dst});
  const std::string staging = dst + ".selq-partial";
  remove_all_quietly(staging);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) throw_io(fmt::format("cannot create staging directory: {}", ec.message()), {staging});

  std::unique_ptr<tbb::global_control> limit;
  if (options.threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                  static_cast<std::size_t>(options.threads));
  QuantizeResult result;
  try {
    Progress progress;
    progress.bytes_total = plan.source_bytes();
    progress.tensors_total = plan.tensors.size();
    const auto group_amax = fused_global_amax(src, plan);
    std::vector<TensorRecord> records(plan.tensors.size());
    for (const auto& shard : plan.shards)
      write_shard(src, plan, shard, staging, options, group_amax, records, progress);
    result.manifest = finalize_checkpoint(src, plan, recipe, records, staging);
  } catch (...) {
    remove_all_quietly(staging);
    throw;
  }

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
