// Writing one output shard: the TBB read -> quantize -> write pipeline, the
// journal intent and the rename that commits it.
#include "pipeline/shard_writer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <stdexcept>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_pipeline.h>
#include <oneapi/tbb/task_arena.h>

#include "core/error.h"
#include "core/format_bytes.h"
#include "io/safetensors.h"
#include "io/xxh3.h"
#include "pipeline/buffer_pool.h"
#include "pipeline/shard_schedule.h"
#include "quant/gptq_grid.h"
#include "quant/row_blocks.h"
#include "quant/rounding_traits.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {

namespace {
// XXH3 over bytes given piece by piece, in order.
class StreamHash {
 public:
  StreamHash() : st_(XXH3_createState(), XXH3_freeState) {
    if (!st_) throw std::bad_alloc();
    XXH3_64bits_reset(st_.get());
  }
  void update(std::span<const std::uint8_t> b) { XXH3_64bits_update(st_.get(), b.data(), b.size()); }
  std::uint64_t digest() const { return XXH3_64bits_digest(st_.get()); }

 private:
  std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> st_;
};

// A tensor quantized (or passed through) in blocks: what its blocks share.
// The hashes and the metric pieces are taken in block order (the pipeline's
// last stage is in order), so they equal the whole tensor's.
struct SplitTensor {
  io::FetchedTensor source;   // a view of the whole tensor's mapping
  std::int64_t units{0};      // as WorkItem's: rows or experts, or bytes passed through
  std::optional<float> amax;  // the per-tensor or fused-group amax every block uses
  StreamHash source_hash;
  std::vector<StreamHash> output_hashes;
  std::vector<quant::ErrorMetrics> pieces;
};

// Bytes of one output written by an item, at `offset` within that output.
struct Part {
  std::size_t output{0};
  std::uint64_t offset{0};
  std::span<const std::uint8_t> bytes;
};

// Output bytes of one work item while it is in flight. Kept and
// passed-through tensors are views of the source mapping (no copy).
struct InFlight {
  std::size_t index{0};
  WorkItem item;
  std::vector<Buffer> buffers;                       // quantized outputs
  std::vector<std::span<const std::uint8_t>> views;  // what to write, one per output
  io::FetchedTensor source;  // keeps downloaded pass-through bytes alive until written
  TensorRecord record;
  // A block: the tensor's shared state, its source bytes, what it writes.
  std::shared_ptr<SplitTensor> split;
  std::span<const std::uint8_t> block_source;
  std::vector<Part> parts;
  std::vector<quant::ErrorMetrics> pieces;
};

std::uint64_t xxh3(std::span<const std::uint8_t> b) { return XXH3_64bits(b.data(), b.size()); }

// Called once a source tensor's bytes have been used for the last time here.
void release(const TensorSource& source, const io::FetchedTensor& t) {
  if (source.views_of_files)
    io::release_file_pages(t.view.bytes);
  else if (source.done && t.view.info)
    source.done(t.view.info->name);
}

// Maps a source tensor's pages before use, in 8 MiB pieces on all cores: as
// one call on the worker holding the tensor, a shard ending in a few huge
// tensors (an lm_head, an embedding) left the other cores idle.
void populate(std::span<const std::uint8_t> bytes) {
  constexpr std::size_t kPiece = std::size_t{8} << 20;
  tbb::parallel_for(std::size_t{0}, (bytes.size() + kPiece - 1) / kPiece, [&](std::size_t i) {
    io::populate_pages(bytes.subspan(i * kPiece, std::min(kPiece, bytes.size() - i * kPiece)));
  });
}

// The float weight a planned tensor quantizes: the source tensor itself, or,
// for a re-quantized module, its stored tensors dequantized to F32 (the
// fingerprint then covers every stored tensor read).
struct FloatWeight {
  io::FetchedTensor fetched;
  TensorInfo info;
  std::vector<std::uint8_t> owned;
  std::uint64_t hash{0};
  TensorView view() const { return fetched.view.info ? fetched.view : TensorView{&info, owned}; }
};

// `fingerprint`: whether to hash the source bytes (w.hash); the fused-group
// amax pre-pass only needs the values, and hashing every member there was a
// second full pass over their bytes.
enum class Fingerprint { Take, Skip };

void load_float_weight(const TensorSource& source, const PlannedTensor& t, FloatWeight& w,
                       Fingerprint fingerprint = Fingerprint::Take) {
  const bool take = fingerprint == Fingerprint::Take;
  if (!t.stored) {
    w.fetched = source(t.source_shard, t.source);
    if (source.views_of_files) populate(w.fetched.view.bytes);  // downloaded bytes are in memory
    if (take) w.hash = xxh3(w.fetched.view.bytes);
    return;
  }
  std::vector<io::FetchedTensor> inputs;
  std::vector<std::span<const std::uint8_t>> spans;
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& name : t.stored->tensors) {
    inputs.push_back(source(t.source_shard, name));
    spans.push_back(inputs.back().view.bytes);
    if (source.views_of_files) populate(spans.back());
    if (take) XXH3_64bits_update(st, spans.back().data(), spans.back().size());
  }
  w.hash = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  std::vector<float> dq;
  try {
    dq = quant::dequantize_weight(t.stored->scheme, t.stored->shape, spans);
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), {t.source_shard, t.source}, e.hint());
  }
  for (const auto& input : inputs) release(source, input);
  w.info = TensorInfo{t.module + ".weight", DType::F32, t.stored->shape};
  w.owned.resize(dq.size() * sizeof(float));
  std::memcpy(w.owned.data(), dq.data(), w.owned.size());
}

// NVFP4 members of a fused group (q/k/v, gate/up, w1/w3) share one global
// scale: the max amax of the members (= the min of the compressed-tensors
// global scales, which is what llm-compressor writes and what vLLM's fused
// loader needs to be exact).
std::map<std::string, float> fused_global_amax(const TensorSource& source, const Plan& plan,
                                               const std::vector<std::size_t>& members) {
  std::vector<float> amax(members.size());
  // The first kKeepMapped bytes of members read here stay mapped for the main
  // pass, which would otherwise map them a second time; the main pass unmaps
  // them when they are consumed. Past that budget they are unmapped at once,
  // so that the resident set does not grow with the checkpoint.
  constexpr std::uint64_t kKeepMapped = std::uint64_t{256} << 20;
  std::atomic<std::uint64_t> kept{0};
  tbb::parallel_for(std::size_t{0}, members.size(), [&](std::size_t k) {
    FloatWeight w;
    load_float_weight(source, plan.tensors[members[k]], w, Fingerprint::Skip);
    amax[k] = quant::tensor_amax(w.view());
    const std::uint64_t n = w.fetched.view.bytes.size();
    if (kept.fetch_add(n) + n > kKeepMapped) release(source, w.fetched);
  });
  std::map<std::string, float> out;
  for (std::size_t k = 0; k < members.size(); ++k) {
    const auto& g = plan.tensors[members[k]].fused_group;
    out[g] = std::max(out.count(g) ? out[g] : 0.0f, amax[k]);
  }
  return out;
}

// The pooled buffers quantizing a planned tensor takes: one per output. A
// kept or passed-through tensor takes none (it is written from its source).
std::vector<std::size_t> output_buffer_sizes(const PlannedTensor& t) {
  std::vector<std::size_t> sizes;
  if (t.scheme)
    for (const auto& o : t.outputs) sizes.push_back(o.info.nbytes());
  return sizes;
}

// The pooled buffers a work item takes (a block's are its share of the
// outputs; the first block also takes the per-tensor ones).
std::vector<std::size_t> item_buffer_sizes(const PlannedTensor& t, const WorkItem& item) {
  if (!item.block) return output_buffer_sizes(t);
  std::vector<std::size_t> sizes;
  if (!t.scheme) return sizes;
  for (const auto& r : quant::block_outputs(*t.scheme, t.source_info.shape, item.u0, item.u1)) sizes.push_back(r.size);
  if (t.input_amax && item.first()) sizes.push_back(t.outputs.back().info.nbytes());
  return sizes;
}

}  // namespace

GroupAmax::GroupAmax(std::map<std::string, float> known) : known_(std::move(known)) {}

GroupAmax::GroupAmax(const TensorSource& source, const Plan& plan, std::map<std::string, float> known)
    : known_(std::move(known)), source_(&source), plan_(&plan) {
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    if (!plan.tensors[i].fused_group.empty()) members_[plan.tensors[i].fused_group].push_back(i);
}

float GroupAmax::of(const PlannedTensor& member) {
  const std::string& group = member.fused_group;
  if (const auto known = known_.find(group); known != known_.end()) return known->second;
  if (!plan_) throw std::logic_error("fused group '" + group + "' has no amax");
  std::promise<float> promise;
  std::shared_future<float> amax;
  bool compute_here = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = amax_.find(group);
    if (it == amax_.end()) {
      it = amax_.emplace(group, promise.get_future().share()).first;
      compute_here = true;
    }
    amax = it->second;
  }
  if (compute_here) {
    try {
      // Isolated: while its nested parallel loops wait, this thread must not
      // take another member's pipeline task, which would wait on this future.
      promise.set_value(tbb::this_task_arena::isolate([&] { return compute(group, member.source_shard); }));
    } catch (...) {
      promise.set_exception(std::current_exception());
    }
  }
  return amax.get();
}

float GroupAmax::compute(const std::string& group, const std::string& shard) const {
  float amax = 0.0f;
  for (std::size_t k : members_.at(group)) {
    FloatWeight w;
    load_float_weight(*source_, plan_->tensors[k], w, Fingerprint::Skip);
    amax = std::max(amax, quant::tensor_amax(w.view()));
    // The members in this shard are quantized within a few tensors: their
    // pages stay mapped for them (and their bytes are still in the cache). A
    // member in another source shard is not needed again until that shard.
    // Downloaded, every member is kept for its turn (at most the reader's
    // window, pipeline/remote_reader.h), not downloaded again.
    if (source_->views_of_files && plan_->tensors[k].source_shard != shard) release(*source_, w.fetched);
  }
  return amax;
}

namespace {

// Rounding gptq's weights for `t`, which quantize() obtained from the GPTQ pass.
const RoundedWeights& rounded_weights(const QuantizeOptions& options, const PlannedTensor& t) {
  if (!options.rounded)
    throw Error(ErrorKind::Internal, "rounding 'gptq' without its GPTQ pass (QuantizeOptions::rounded)",
                {"", t.source});
  return *options.rounded;
}

void produce(const TensorSource& source, const PlannedTensor& t, const QuantizeOptions& options,
             GroupAmax& group_amax, BufferPool& pool, InFlight& f) {
  // The group's amax first: the member computing it maps the others, and a
  // member mapping its own pages at the same time contended for them page by
  // page (waits of up to 0.2 s on a page lock were traced).
  std::optional<float> global_amax;
  if (!t.fused_group.empty()) global_amax = group_amax.of(t);
  FloatWeight w;
  load_float_weight(source, t, w);
  f.source = std::move(w.fetched);
  w.fetched = {};
  const TensorView in = t.stored ? w.view() : f.source.view;
  f.record.source = t.source;
  f.record.source_hash = w.hash;
  if (!t.scheme) {
    f.views.push_back(in.bytes);
    f.record.output_hashes.push_back(f.record.source_hash);
    return;
  }
  std::vector<std::span<std::uint8_t>> outs;
  for (const std::size_t size : output_buffer_sizes(t)) {
    f.buffers.push_back(pool.acquire(size));
    outs.push_back(f.buffers.back().bytes());
  }
  quant::TensorQuantizeOptions qo;
  qo.reject_non_finite = !options.allow_non_finite;
  qo.global_amax = global_amax;
  if (t.channel_weights) qo.channel_weights = *t.channel_weights;
  qo.nvfp4_pow2_scales = t.exact_from_mxfp4;
  // A static activation scale is the last output; it comes from the
  // calibration, not from the weight.
  std::span<std::span<std::uint8_t>> weight_outs(outs);
  if (t.input_amax) {
    weight_outs = weight_outs.first(outs.size() - 1);
    try {
      quant::encode_activation_scale(*t.scheme, *t.input_amax, outs.back());
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), {"", t.source}, e.hint());
    }
  }
  quant::ErrorMetrics metrics;
  if (quant::rounding_input(t.scheme->rounding.value) == quant::RoundingInput::ModelPass) {
    qo.channel_weights = rounded_weights(options, t).channel_weights(t.source);
    quant::store_gptq_weights(*t.scheme, in, rounded_weights(options, t).view(t.source), weight_outs, metrics, qo);
  } else {
    quant::quantize_weight(*t.scheme, in, weight_outs, metrics, qo);
  }
  release(source, f.source);  // the source bytes are no longer needed
  f.source = {};
  f.record.metrics = metrics;
  for (auto& b : f.buffers) {
    f.views.push_back(b.bytes());
    f.record.output_hashes.push_back(xxh3(b.bytes()));
  }
}

// The state a tensor's blocks share, made when its first block is taken. The
// amax that one scale covering all rows needs (fused group, NVFP4 global or
// FP8 per-tensor) comes first, over the whole tensor, whose pages then stay
// mapped for the blocks; the blocks unmap them as they are consumed.
std::shared_ptr<SplitTensor> start_split(const TensorSource& source, const PlannedTensor& t, GroupAmax& group_amax) {
  auto s = std::make_shared<SplitTensor>();
  s->source = source(t.source_shard, t.source);
  s->units = t.scheme ? t.source_info.shape.at(0) : static_cast<std::int64_t>(t.in_bytes());
  s->output_hashes.resize(t.outputs.size());
  if (!t.fused_group.empty()) {
    s->amax = group_amax.of(t);
  } else if (t.scheme && quant::row_blocking(*t.scheme, t.source_info.shape).needs_tensor_amax) {
    s->amax = tbb::this_task_arena::isolate([&] {
      populate(s->source.view.bytes);
      return quant::tensor_amax(s->source.view);
    });
  }
  return s;
}

// Quantizes one block of a split tensor into pooled buffers of the block's
// output size (a passed-through block is a view of the source).
void produce_block(const PlannedTensor& t, const QuantizeOptions& options, BufferPool& pool, InFlight& f) {
  const SplitTensor& s = *f.split;
  const WorkItem& item = f.item;
  const auto n = item.u1 - item.u0;
  if (!t.scheme) {
    f.block_source = s.source.view.bytes.subspan(static_cast<std::size_t>(item.u0), static_cast<std::size_t>(n));
    populate(f.block_source);
    f.parts.push_back({0, static_cast<std::uint64_t>(item.u0), f.block_source});
    return;
  }
  const TensorInfo& info = t.source_info;
  const std::int64_t units = info.shape.at(0);
  const std::uint64_t unit_bytes = info.nbytes() / static_cast<std::uint64_t>(units);
  f.block_source = s.source.view.bytes.subspan(item.u0 * unit_bytes, n * unit_bytes);
  populate(f.block_source);
  const TensorInfo block_info{info.name, info.dtype, quant::block_shape(info.shape, n)};
  const auto ranges = quant::block_outputs(*t.scheme, info.shape, item.u0, item.u1);
  std::vector<std::span<std::uint8_t>> outs;
  for (const auto& r : ranges) {
    f.buffers.push_back(pool.acquire(r.size));
    outs.push_back(f.buffers.back().bytes());
  }
  if (t.input_amax && item.first()) {  // the static activation scale, written once
    f.buffers.push_back(pool.acquire(t.outputs.back().info.nbytes()));
    try {
      quant::encode_activation_scale(*t.scheme, *t.input_amax, f.buffers.back().bytes());
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), {"", t.source}, e.hint());
    }
    f.parts.push_back({t.outputs.size() - 1, 0, f.buffers.back().bytes()});
  }
  quant::TensorQuantizeOptions qo;
  qo.reject_non_finite = !options.allow_non_finite;
  qo.global_amax = s.amax;
  if (t.channel_weights) qo.channel_weights = *t.channel_weights;
  qo.nvfp4_pow2_scales = t.exact_from_mxfp4;
  qo.pieces = &f.pieces;
  qo.first_element = static_cast<std::uint64_t>(item.u0) * (shape_numel(info.shape) / static_cast<std::uint64_t>(units));
  quant::ErrorMetrics unused;
  const TensorView block{&block_info, f.block_source};
  if (quant::rounding_input(t.scheme->rounding.value) == quant::RoundingInput::ModelPass) {
    const TensorView whole = rounded_weights(options, t).view(t.source);
    qo.channel_weights = rounded_weights(options, t).channel_weights(t.source);
    const TensorInfo rounded_info{info.name, whole.info->dtype, block_info.shape};
    const std::size_t row_bytes = whole.bytes.size() / static_cast<std::size_t>(units);
    quant::store_gptq_weights(*t.scheme, block,
                              {&rounded_info, whole.bytes.subspan(static_cast<std::size_t>(item.u0) * row_bytes,
                                                                  static_cast<std::size_t>(n) * row_bytes)},
                              outs, unused, qo);
  } else {
    quant::quantize_weight(*t.scheme, block, outs, unused, qo);
  }
  for (std::size_t k = 0; k < ranges.size(); ++k)
    if (!ranges[k].whole || item.first()) f.parts.push_back({k, ranges[k].offset, outs[k]});
}

// The block, through the last stage in order: its bytes go into the tensor's
// hashes, its source pages are unmapped; the last block makes the record.
// Returns whether it was the last.
bool record_block(const PlannedTensor& t, io::SafetensorsWriter& writer, InFlight& f) {
  SplitTensor& s = *f.split;
  s.source_hash.update(f.block_source);
  if (t.scheme)
    for (const auto& p : f.parts) s.output_hashes[p.output].update(p.bytes);
  s.pieces.insert(s.pieces.end(), f.pieces.begin(), f.pieces.end());
  io::release_file_pages(f.block_source);  // blocks are views of files
  if (f.item.u1 != s.units) return false;
  f.record.source = t.source;
  f.record.source_hash = s.source_hash.digest();
  for (std::size_t k = 0; k < t.outputs.size(); ++k) {
    f.record.output_hashes.push_back(t.scheme ? s.output_hashes[k].digest() : f.record.source_hash);
    writer.finish(t.outputs[k].info.name, f.record.output_hashes.back());
  }
  if (t.scheme) f.record.metrics = quant::merge_pieces(*t.scheme, t.source_info.shape, s.pieces);
  return true;
}

// Keeps the kernel reading the source ahead of the pipeline. On a cold page
// cache the workers otherwise waited on the disk tensor by tensor (a page
// fault reads a few hundred KiB at a time), and the disk idled while they
// computed: an FP8 run on a VM disk read at half the rate of cp.
class ReadAhead {
 public:
  ReadAhead(const TensorSource& source, const Plan& plan, const PlannedShard& shard)
      : source_(source), plan_(plan), shard_(shard) {}

  // The pipeline has taken the shard's k-th tensor: have the next kAhead
  // bytes of source after it requested.
  void taken(std::size_t k) {
    if (!source_.views_of_files) return;  // remote: fetching is the download
    taken_bytes_ += plan_.tensors[shard_.tensors[k]].in_bytes();
    while (requested_ < shard_.tensors.size() && requested_bytes_ < taken_bytes_ + kAhead) {
      const PlannedTensor& t = plan_.tensors[shard_.tensors[requested_++]];
      requested_bytes_ += t.in_bytes();
      if (!t.stored) {
        io::prefetch_file_pages(source_(t.source_shard, t.source).view.bytes);
      } else {
        for (const auto& name : t.stored->tensors)
          io::prefetch_file_pages(source_(t.source_shard, name).view.bytes);
      }
    }
  }

 private:
  static constexpr std::uint64_t kAhead = std::uint64_t{64} << 20;
  const TensorSource& source_;
  const Plan& plan_;
  const PlannedShard& shard_;
  std::size_t requested_{0};
  std::uint64_t taken_bytes_{0}, requested_bytes_{0};
};

std::vector<TensorInfo> shard_infos(const Plan& plan, const PlannedShard& shard) {
  std::vector<TensorInfo> infos;
  for (auto i : shard.tensors)
    for (const auto& o : plan.tensors[i].outputs) infos.push_back(o.info);
  return infos;
}

// Quantizes (or passes through) the tensors of `work` into `writer`, whose
// layout is their shard's: all of it, or one rank's part of it, as a TBB
// pipeline of four stages (read, quantize, write, record). Memory: the
// pipeline's tokens bound the tensors in flight.
class ShardPipeline {
 public:
  ShardPipeline(const TensorSource& source, const Plan& plan, const PlannedShard& work, io::SafetensorsWriter& writer,
                const QuantizeOptions& options, GroupAmax& group_amax, std::vector<TensorRecord>& records,
                Progress& progress, BufferPool& pool)
      : source_(source), plan_(plan), writer_(writer), options_(options), group_amax_(group_amax), records_(records),
        progress_(progress), pool_(pool),
        schedule_(schedule_shard(plan, work, source.views_of_files, options.memory_budget,
                                 static_cast<std::size_t>(tbb::this_task_arena::max_concurrency()))),
        read_ahead_(source, plan, work) {}

  ShardRecords run() {
    std::vector<std::size_t> first_buffers;
    for (std::size_t k = 0; k < std::min(schedule_.tokens, schedule_.items.size()); ++k) {
      const auto sizes = item_buffer_sizes(plan_.tensors[schedule_.items[k].tensor], schedule_.items[k]);
      first_buffers.insert(first_buffers.end(), sizes.begin(), sizes.end());
    }
    pool_.prepare(std::move(first_buffers));
    tbb::parallel_pipeline(
        schedule_.tokens,
        tbb::make_filter<void, InFlight*>(tbb::filter_mode::serial_in_order,
                                          [this](tbb::flow_control& fc) { return read_next(fc); }) &
            tbb::make_filter<InFlight*, InFlight*>(tbb::filter_mode::parallel,
                                                   [this](InFlight* f) { return quantize(f); }) &
            tbb::make_filter<InFlight*, InFlight*>(tbb::filter_mode::serial_out_of_order,
                                                   [this](InFlight* f) { return write(f); }) &
            tbb::make_filter<InFlight*, void>(tbb::filter_mode::serial_in_order, [this](InFlight* f) { record(f); }));
    return std::move(shard_records_);
  }

 private:
  InFlight* read_next(tbb::flow_control& fc) {
    if (next_ == schedule_.items.size()) {
      fc.stop();
      return nullptr;
    }
    const WorkItem& item = schedule_.items[next_++];
    if (item.first()) read_ahead_.taken(tensors_taken_++);
    auto f = std::make_unique<InFlight>();
    f->index = item.tensor;
    f->item = item;
    if (item.block) {
      if (item.first()) split_ = start_split(source_, plan_.tensors[item.tensor], group_amax_);
      f->split = split_;
    }
    return f.release();
  }

  InFlight* quantize(InFlight* f) {
    std::unique_ptr<InFlight> guard(f);
    if (f->split)
      produce_block(plan_.tensors[f->index], options_, pool_, *f);
    else
      produce(source_, plan_.tensors[f->index], options_, group_amax_, pool_, *f);
    return guard.release();
  }

  // One writer at a time, in whatever order tensors finish (every tensor has
  // a fixed offset, so the bytes do not depend on it). The kernel serializes
  // writes to one file on its inode lock anyway, and writers waiting there
  // spin; here a waiting tensor is queued and its thread quantizes the next
  // one instead.
  InFlight* write(InFlight* f) {
    std::unique_ptr<InFlight> guard(f);
    const auto& t = plan_.tensors[f->index];
    if (f->split) {  // a block: its buffers wait for the hashes, in order
      for (const auto& p : f->parts) writer_.write_part(t.outputs[p.output].info.name, p.offset, p.bytes);
      return guard.release();
    }
    for (std::size_t k = 0; k < t.outputs.size(); ++k)
      writer_.write(t.outputs[k].info.name, f->views[k], f->record.output_hashes[k]);
    // Written: only the record waits for its turn.
    f->views.clear();
    release(source_, f->source);  // a passed-through tensor's source
    for (auto& b : f->buffers) pool_.release(std::move(b));
    f->buffers.clear();
    f->source = {};
    return guard.release();
  }

  void record(InFlight* f) {
    std::unique_ptr<InFlight> owned(f);
    const auto& t = plan_.tensors[f->index];
    bool done = true;
    if (f->split) {
      done = record_block(t, writer_, *f);
      for (auto& b : f->buffers) pool_.release(std::move(b));
      f->buffers.clear();
      progress_.bytes_done += f->block_source.size();  // the blocks cover the tensor
    } else {
      progress_.bytes_done += t.in_bytes();
    }
    if (done) {
      shard_records_.emplace_back(f->index, f->record);
      records_[f->index] = std::move(f->record);
      ++progress_.tensors_done;
    }
    if (options_.on_progress) options_.on_progress(progress_);
  }

  const TensorSource& source_;
  const Plan& plan_;
  io::SafetensorsWriter& writer_;
  const QuantizeOptions& options_;
  GroupAmax& group_amax_;
  std::vector<TensorRecord>& records_;
  Progress& progress_;
  BufferPool& pool_;
  const ShardSchedule schedule_;
  ReadAhead read_ahead_;
  std::size_t next_{0}, tensors_taken_{0};
  std::shared_ptr<SplitTensor> split_;  // of the tensor whose blocks are being taken
  ShardRecords shard_records_;
};

ShardRecords write_tensors(const TensorSource& source, const Plan& plan, const PlannedShard& work,
                           io::SafetensorsWriter& writer, const QuantizeOptions& options, GroupAmax& group_amax,
                           std::vector<TensorRecord>& records, Progress& progress, BufferPool& pool) {
  return ShardPipeline(source, plan, work, writer, options, group_amax, records, progress, pool).run();
}

}  // namespace

// Writes one output shard to `path` (via its temporary name), journals the
// intent with the new file's hash and the tensor records, then renames it
// into place.
void write_shard(const TensorSource& source, const Plan& plan, const PlannedShard& shard, const std::string& path,
                 const QuantizeOptions& options, GroupAmax& group_amax,
                 Journal& journal, std::vector<TensorRecord>& records, Progress& progress, BufferPool& pool) {
  io::SafetensorsWriter writer(path, shard_infos(plan, shard), {{"format", "pt"}});
  const ShardRecords shard_records =
      write_tensors(source, plan, shard, writer, options, group_amax, records, progress, pool);
  // The intent carries the hash of the file's content, combined from the
  // tensor hashes already taken (no read-back). It may be journaled before
  // the data is durable: commit() fsyncs the file before the rename, and
  // until the rename the final name does not exist, so a crash in between
  // only means the shard is written again.
  journal.record_intent(shard.name, writer.content_hash(), shard_records);
  writer.commit();
}

ShardRecords write_shard_part(const TensorSource& source, const Plan& plan, const PlannedShard& shard,
                              const PlannedShard& part, const std::string& path, const QuantizeOptions& options,
                              GroupAmax& group_amax, std::vector<TensorRecord>& records, Progress& progress,
                              BufferPool& pool) {
  io::SafetensorsWriter writer(path, shard_infos(plan, shard), {{"format", "pt"}}, io::SafetensorsWriter::Open::Shared);
  ShardRecords out = write_tensors(source, plan, part, writer, options, group_amax, records, progress, pool);
  writer.flush();  // durable before rank 0 is told, and journals it
  return out;
}

void commit_shared_shard(const Plan& plan, const PlannedShard& shard, const std::string& path, Journal& journal,
                         const ShardRecords& shard_records) {
  io::SafetensorsWriter writer(path, shard_infos(plan, shard), {{"format", "pt"}}, io::SafetensorsWriter::Open::Shared);
  for (const auto& [i, r] : shard_records) {
    const PlannedTensor& t = plan.tensors.at(i);
    if (r.output_hashes.size() != t.outputs.size())
      throw Error(ErrorKind::Internal, fmt::format("{} output hashes reported for {} outputs", r.output_hashes.size(),
                                                   t.outputs.size()),
                  {path, t.source});
    for (std::size_t k = 0; k < t.outputs.size(); ++k) writer.finish(t.outputs[k].info.name, r.output_hashes[k]);
  }
  journal.record_intent(shard.name, writer.content_hash(), shard_records);
  writer.commit();
}

void require_memory_budget(const QuantizeOptions& options) {
  if (options.memory_budget < kMinMemoryBudget)
    throw_bad_input(fmt::format("the memory budget of {} is below the minimum of {}", format_bytes(options.memory_budget),
                                format_bytes(kMinMemoryBudget)),
                    {}, ErrorHint::MemoryBudget);
}

void remove_all_quietly(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
}

// Account for a shard committed by an earlier run: its records come from the journal.
void adopt_committed_shard(const Plan& plan, const PlannedShard& shard, const std::string& path,
                           const Journal& journal, std::vector<TensorRecord>& records, Progress& progress,
                           const QuantizeOptions& options) {
  // A run killed between the journal intent and the rename leaves the
  // finished temporary file behind. Usually the shard is then rewritten and
  // the rename consumes it; but a shard whose rewrite equals the original
  // (only passed-through tensors, in place) counts as committed as it
  // stands, and its temporary file would stay in the checkpoint for good.
  std::error_code ec;
  fs::remove(io::SafetensorsWriter::temp_path_for(path), ec);
  for (auto& [i, r] : journal.records(shard.name)) {
    records.at(i) = std::move(r);
    progress.bytes_done += plan.tensors[i].in_bytes();
    ++progress.tensors_done;
  }
  if (options.on_progress) options.on_progress(progress);
}

ThreadLimit::ThreadLimit(int threads) {
  if (threads > 0)
    limit = std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                                  static_cast<std::size_t>(threads));
  if (threads > tbb::info::default_concurrency()) arena = std::make_unique<tbb::task_arena>(threads);
}

std::map<std::string, float> journaled_group_amax(Journal& journal, const TensorSource& source, const Plan& plan) {
  if (!journal.has_group_amax()) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < plan.tensors.size(); ++i)
      if (!plan.tensors[i].fused_group.empty()) members.push_back(i);
    journal.set_group_amax(fused_global_amax(source, plan, members));
  }
  return journal.group_amax();
}

std::map<std::string, float> group_amax_of(const TensorSource& source, const Plan& plan,
                                           const std::vector<std::size_t>& members) {
  return fused_global_amax(source, plan, members);
}

}  // namespace selq::pipeline::detail
