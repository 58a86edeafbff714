#include "rotation/rotate_checkpoint.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <fmt/format.h>

#include <tbb/parallel_for.h>

#include "core/codecs.h"
#include "core/codecs_simd.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "io/xxh3.h"
#include "rotation/orthogonal.h"

namespace fs = std::filesystem;

namespace selq::rotation {
namespace {

constexpr const char* kEmbed = "model.embed_tokens.weight";
constexpr const char* kHead = "lm_head.weight";

void store_floats(DType dtype, const float* in, std::size_t n, std::uint8_t* out) {
  switch (dtype) {
    case DType::F32: std::memcpy(out, in, n * sizeof(float)); return;
    case DType::BF16: f32_to_bf16_bulk(in, reinterpret_cast<std::uint16_t*>(out), n); return;
    case DType::F16:
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = f32_to_f16_ref(in[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    default: throw Error(ErrorKind::Internal, fmt::format("rotation: cannot store {}", dtype_name(dtype)));
  }
}

// The matrices a fold names, built once.
struct Matrices {
  Orthogonal residual;
  std::unique_ptr<Orthogonal> head;  // R2 only
  const Orthogonal& of(SegmentRotation::Matrix m) const { return m == SegmentRotation::Matrix::Head ? *head : residual; }
};

void apply(const Matrices& mats, const SegmentRotation& r, float* rows, std::int64_t nrows, std::int64_t width,
           const std::string& tensor) {
  const Orthogonal& q = mats.of(r.matrix);
  // Along a row, segments are whole heads (offset 0); MLA's value rows inside
  // a period are an output side's, which apply_to_columns takes.
  const std::int64_t period = r.period == 0 ? width : r.period;
  if (period != q.size() || r.offset != 0 || width % period != 0)
    throw_bad_input(fmt::format("{}: rows of {} are not whole blocks of {} (a rotation of {})", tensor, width, period,
                                q.size()),
                    {"", tensor});
  q.apply_segments(rows, nrows, width, false);
}

// W (rows x cols) <- Q^T W on its rows' segments: for each k, the rows
// [k period + offset, + size) (all rows when period is 0).
void apply_to_columns(const Matrices& mats, const SegmentRotation& r, float* w, std::int64_t rows, std::int64_t cols,
                      const std::string& tensor) {
  const Orthogonal& q = mats.of(r.matrix);
  const std::int64_t period = r.period == 0 ? q.size() : r.period;
  if (rows % period != 0 || r.offset + q.size() > period)
    throw_bad_input(fmt::format("{}: {} rows are not whole blocks of {} (a rotation of {} at {})", tensor, rows, period,
                                q.size(), r.offset),
                    {"", tensor});
  for (std::int64_t k = 0; k < rows / period; ++k) q.apply_columns(w + (k * period + r.offset) * cols, cols);
}

// Each row of x (rows x width) times `scale` element by element (a folded norm).
void scale_columns(float* x, std::int64_t rows, std::int64_t width, const std::vector<float>& scale) {
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, rows, 16), [&](const auto& r) {
    for (std::int64_t i = r.begin(); i < r.end(); ++i)
      for (std::int64_t j = 0; j < width; ++j) x[i * width + j] *= scale[static_cast<std::size_t>(j)];
  });
}

// One output tensor: where its values come from and what is done to them.
struct Job {
  TensorInfo out;
  std::string source;  // the source tensor read (lm_head of a tied head: the embedding)
  TensorFold fold;
};

class Rotator {
 public:
  Rotator(const io::Checkpoint& ck, const Matrices& mats, std::uint64_t block_bytes)
      : ck_(ck), mats_(mats), block_bytes_(block_bytes) {}

  // Streams `job` into `w`; returns the bytes read. The source's pages are
  // dropped after (as the quantize pipeline does): RSS stays at a tensor's.
  std::uint64_t write(const Job& job, io::SafetensorsWriter& w) {
    const io::FetchedTensor src = ck_.fetch(job.source);
    const std::uint64_t n = write_fetched(job, src, w);
    io::release_file_pages(src.view.bytes);
    return n;
  }

 private:
  const io::Checkpoint& ck_;
  const Matrices& mats_;
  std::uint64_t block_bytes_;
  std::map<std::string, std::vector<float>> norms_;

  std::uint64_t write_fetched(const Job& job, const io::FetchedTensor& src, io::SafetensorsWriter& w) {
    const TensorInfo& info = job.out;
    const DType in_dtype = ck_.find(job.source)->info.dtype;  // the output may be wider (f32_linears)
    const std::int64_t numel = static_cast<std::int64_t>(shape_numel(info.shape));
    const int esize = dtype_bits(info.dtype) / 8;
    if (!job.fold.changes()) {
      w.write(info.name, src.view.bytes);
      return src.view.bytes.size();
    }
    if (job.fold.ones) {
      std::vector<float> ones(static_cast<std::size_t>(numel), 1.f);
      std::vector<std::uint8_t> bytes(info.nbytes());
      store_floats(info.dtype, ones.data(), ones.size(), bytes.data());
      w.write(info.name, bytes);
      return src.view.bytes.size();
    }
    const std::int64_t in = info.shape.empty() ? 1 : info.shape.back();
    const std::int64_t out = info.shape.size() >= 2 ? info.shape[info.shape.size() - 2] : in;
    const std::vector<float> scale = job.fold.input_scale.empty() ? std::vector<float>{} : norm(job.fold.input_scale, in);
    if (info.shape.size() == 1) {  // a bias: the output side's rotation of one row
      std::vector<float> v(static_cast<std::size_t>(numel));
      load_floats(in_dtype, src.view.bytes.data(), 0, v.size(), v.data());
      if (job.fold.output) apply(mats_, *job.fold.output, v.data(), 1, numel, info.name);
      std::vector<std::uint8_t> bytes(info.nbytes());
      store_floats(info.dtype, v.data(), v.size(), bytes.data());
      w.write(info.name, bytes);
      return src.view.bytes.size();
    }
    // Row blocks (input side only) or whole [out, in] matrices (output side).
    const std::int64_t total_rows = numel / in;
    const std::int64_t block_rows =
        job.fold.output ? out : std::max<std::int64_t>(1, static_cast<std::int64_t>(block_bytes_ / (4 * in)));
    std::unique_ptr<XXH3_state_t, XXH_errorcode (*)(XXH3_state_t*)> hash(XXH3_createState(), XXH3_freeState);
    XXH3_64bits_reset(hash.get());
    std::vector<float> f;
    std::vector<std::uint8_t> bytes;
    for (std::int64_t r0 = 0; r0 < total_rows; r0 += block_rows) {
      const std::int64_t rows = std::min(block_rows, total_rows - r0);
      f.resize(static_cast<std::size_t>(rows * in));
      load_floats(in_dtype, src.view.bytes.data(), static_cast<std::uint64_t>(r0 * in), f.size(), f.data());
      if (!scale.empty()) scale_columns(f.data(), rows, in, scale);
      if (job.fold.input) apply(mats_, *job.fold.input, f.data(), rows, in, info.name);
      if (job.fold.output) apply_to_columns(mats_, *job.fold.output, f.data(), rows, in, info.name);  // W <- Q^T W
      bytes.resize(f.size() * static_cast<std::size_t>(esize));
      store_floats(info.dtype, f.data(), f.size(), bytes.data());
      w.write_part(info.name, static_cast<std::uint64_t>(r0 * in * esize), bytes);
      XXH3_64bits_update(hash.get(), bytes.data(), bytes.size());
    }
    w.finish(info.name, XXH3_64bits_digest(hash.get()));
    return src.view.bytes.size();
  }

  const std::vector<float>& norm(const std::string& name, std::int64_t size) {
    auto it = norms_.find(name);
    if (it != norms_.end()) return it->second;
    const auto* t = ck_.find(name);
    if (!t) throw_bad_input(fmt::format("the norm {} that a rotation folds is not in the checkpoint", name), {"", name});
    if (t->info.shape != Shape{size})
      throw_bad_input(fmt::format("norm {} is {}, the linears reading it take {}", name, shape_to_string(t->info.shape), size),
                      {"", name});
    const io::FetchedTensor v = ck_.fetch(name);
    std::vector<float> g(static_cast<std::size_t>(size));
    load_floats(t->info.dtype, v.view.bytes.data(), 0, g.size(), g.data());
    return norms_.emplace(name, std::move(g)).first->second;
  }
};

void refuse_quantized(const io::Checkpoint& ck, const std::string& source) {
  if (ck.config().is_object() && ck.config().contains("quantization_config"))
    throw_unsupported(fmt::format("{}: a rotation folds into float weights; this checkpoint is already quantized "
                                  "(config.json has a quantization_config): rotate its float original",
                                  source));
  for (const auto& t : ck.tensors())
    if (t.info.dtype != DType::BF16 && t.info.dtype != DType::F16 && t.info.dtype != DType::F32)
      throw_unsupported(fmt::format("{}: tensor {} is {}; a rotation folds into BF16, F16 or F32 weights only", source,
                                    t.info.name, dtype_name(t.info.dtype)),
                        {"", t.info.name});
}

// Every output tensor and its fold by source shard, decided before anything is
// written; a tied head (no lm_head.weight) is written beside the embedding.
std::map<std::string, std::vector<Job>> plan_jobs(const io::Checkpoint& ck, const RotationShape& shape,
                                                  const RotateOptions& o, const std::string& source) {
  if (!ck.find(kEmbed)) throw_bad_input(fmt::format("{}: no {}, which a rotation rotates", source, kEmbed), {source, kEmbed});
  const bool untie = ck.find(kHead) == nullptr;
  std::map<std::string, std::vector<Job>> by_shard;
  for (const auto& t : ck.tensors()) {
    Job job{t.info, t.info.name, tensor_fold(shape, o.kind, t.info.name)};
    if (o.f32_linears && job.fold.changes() && t.info.shape.size() >= 2 && t.info.name.starts_with("model.layers."))
      job.out.dtype = DType::F32;
    by_shard[t.shard].push_back(std::move(job));
    if (untie && t.info.name == kEmbed) {
      TensorInfo head = t.info;
      head.name = kHead;
      by_shard[t.shard].push_back({head, kEmbed, tensor_fold(shape, o.kind, kHead)});
    }
  }
  return by_shard;
}

// The shards (same names and order as the source's) and the index.
void write_shards(const io::Checkpoint& ck, std::map<std::string, std::vector<Job>>& by_shard, const Matrices& mats,
                  const RotateOptions& o, const std::string& staging, RotateResult& res) {
  std::size_t done = 0, total = 0;
  for (const auto& [_, jobs] : by_shard) total += jobs.size();
  Rotator rot(ck, mats, o.block_bytes);
  std::map<std::string, std::string> weight_map;
  std::uint64_t total_bytes = 0;
  const bool single_file = ck.shards().size() == 1 && !ck.has_index();
  for (const auto& shard : ck.shards()) {
    const auto& jobs = by_shard[shard];
    const std::string out_name = single_file ? "model.safetensors" : fs::path(shard).filename().string();
    std::vector<TensorInfo> infos;
    for (const auto& j : jobs) {
      infos.push_back(j.out);
      weight_map[j.out.name] = out_name;
      total_bytes += j.out.nbytes();
    }
    io::SafetensorsWriter w((fs::path(staging) / out_name).string(), infos);
    for (const auto& j : jobs) {
      res.bytes_read += rot.write(j, w);
      res.bytes_written += j.out.nbytes();
      if (o.on_progress) o.on_progress(++done, total);
    }
    w.commit();
  }
  if (!single_file) io::write_index((fs::path(staging) / io::kIndexName).string(), weight_map, total_bytes);
}

// config.json with the head untied, the source's other files, the record.
void write_side_files(const io::Checkpoint& ck, const std::string& staging, const nlohmann::json& record) {
  nlohmann::json config = ck.config();
  config["tie_word_embeddings"] = false;  // the head is rotated with the final norm's scale, the embedding without
  io::write_file_atomic((fs::path(staging) / "config.json").string(), config.dump(2) + "\n");
  for (const auto& name : ck.other_files())
    if (name != "config.json" && name != io::kManifestName)
      ck.copy_other_file(name, (fs::path(staging) / name).string());
  io::write_file_atomic((fs::path(staging) / io::kRotationRecordName).string(), record.dump(2) + "\n");
}

}  // namespace

RotateResult rotate_checkpoint(const std::string& source, const std::string& dst, const RotateOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.kind == RotationKind::None) throw_bad_input("rotation 'none' writes nothing: copy the checkpoint instead");
  const auto ck = io::Checkpoint::open(source);
  if (ck->is_remote()) throw_unsupported(fmt::format("{}: a rotation reads a local checkpoint", source));
  if (!io::read_rotation_record(ck->dir()).is_null())
    throw_unsupported(fmt::format("{}: already rotated ({} is there); rotate its original", source, io::kRotationRecordName));
  refuse_quantized(*ck, source);
  const RotationShape shape = rotation_shape(ck->config(), source);
  auto by_shard = plan_jobs(*ck, shape, o, source);
  Matrices mats{Orthogonal(shape.hidden, o.seed, o.block), nullptr};
  if (o.kind == RotationKind::R1R2) mats.head = std::make_unique<Orthogonal>(shape.head_dim, o.seed + 1);
  if (fs::exists(dst) && !o.overwrite) throw_bad_input("destination exists", {dst}, ErrorHint::ReplaceOutput);

  const std::string staging = dst + ".selq-partial";
  std::error_code ec;
  fs::remove_all(staging, ec);
  fs::create_directories(staging);
  RotateResult res;
  write_shards(*ck, by_shard, mats, o, staging, res);
  const bool head_written = ck->find(kHead) == nullptr;
  res.record = {{"rotation", rotation_kind_name(o.kind)},
                {"seed", o.seed},
                {"block", o.block},
                {"source", source},
                {"family", shape.family},
                {"residual", mats.residual.describe()},
                {"untied_head", head_written && shape.tied_head},
                {"head_written", head_written},
                {"f32_linears", o.f32_linears}};
  if (mats.head) res.record["value_heads"] = mats.head->describe();
  write_side_files(*ck, staging, res.record);

  if (fs::exists(dst)) fs::remove_all(dst);  // --force: replaced only once the new one is complete
  fs::rename(staging, dst, ec);
  if (ec) throw_io(fmt::format("cannot rename the rotated checkpoint into place: {}", ec.message()), {dst});
  io::fsync_dir(io::parent_dir(dst));
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

std::string rotated_source(const std::string& source, const std::string& work_dir, const RotateOptions& o) {
  const auto src_dir = io::Checkpoint::open(source)->dir();
  const nlohmann::json own = io::read_rotation_record(src_dir);
  const std::string want = rotation_kind_name(o.kind);
  if (!own.is_null()) {
    if (own["rotation"] == want) return source;
    throw_bad_input(fmt::format("{} already carries rotation {}, not {}: rotate its original", source,
                                own["rotation"].get<std::string>(), want),
                    {source});
  }
  if (fs::exists(work_dir)) {
    const nlohmann::json kept = io::read_rotation_record(work_dir);
    if (kept.is_object() && kept.value("rotation", "") == want && kept.value("seed", std::uint64_t{1} + o.seed) == o.seed &&
        kept.value("block", std::int64_t{-1}) == o.block && kept.value("source", "") == source)
      return work_dir;  // an interrupted run's, complete (it was renamed into place)
  }
  RotateOptions redo = o;
  redo.overwrite = true;  // work_dir is selq's own, named after the destination
  rotate_checkpoint(source, work_dir, redo);
  return work_dir;
}

}  // namespace selq::rotation
