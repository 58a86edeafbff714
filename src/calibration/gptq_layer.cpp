#include "calibration/gptq_layer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "calibration/gptq.h"
#include "calibration/gptq_gate.h"
#include "calibration/input_hessians.h"
#include "calibration/input_recording.h"
#include "core/codecs.h"
#include "core/error.h"
#include "core/expert_name.h"
#include "dist/assign.h"
#include "io/safetensors.h"
#include "pipeline/rounded_weights.h"
#include "quant/gptq_grid.h"
#include "runtime/model/linear.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models and matrices
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string batch_file_prefix(std::int64_t layer) { return fmt::format("layer-{:04d}-b", layer); }
std::string batch_file(const std::string& dir, std::int64_t layer, std::size_t batch) {
  return (fs::path(dir) / fmt::format("{}{:04d}.safetensors", batch_file_prefix(layer), batch)).string();
}
std::vector<std::string> layer_batch_files(const std::string& dir, std::int64_t layer) {
  std::vector<std::string> out;
  const std::string prefix = batch_file_prefix(layer);
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(prefix) && name.ends_with(".safetensors")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> v;
  for (std::size_t b = 0; b < s.size();) {
    const std::size_t e = std::min(s.find(',', b), s.size());
    v.push_back(s.substr(b, e - b));
    b = e + 1;
  }
  return v;
}

// The values `mse` stores for `weight` (what GPTQ keeps the scales of).
std::vector<float> mse_rounded(const quant::SchemeSpec& spec, const TensorView& weight,
                               const quant::TensorQuantizeOptions& options) {
  const auto outs = quant::gptq_scale_outputs(spec, weight, options);
  const std::vector<std::span<const std::uint8_t>> views(outs.begin(), outs.end());
  return quant::dequantize_weight(spec, weight.info->shape, views);
}

io::TensorBytes f32_tensor(const std::string& name, const std::vector<float>& v, Shape shape) {
  io::TensorBytes t{{name, DType::F32, std::move(shape)}, std::vector<std::uint8_t>(v.size() * 4)};
  std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
  return t;
}

// Rounded weights as BF16 when every value is one (MXFP4's E2M1 times a power
// of two: half the file and page cache), else F32.
io::TensorBytes rounded_tensor(const std::string& name, const std::vector<float>& v, Shape shape) {
  const auto bits = exact_bf16(v);
  if (!bits) return f32_tensor(name, v, std::move(shape));
  io::TensorBytes t{{name, DType::BF16, std::move(shape)}, std::vector<std::uint8_t>(bits->size() * 2)};
  std::memcpy(t.bytes.data(), bits->data(), t.bytes.size());
  return t;
}

// Ranks share a layer by its batches, so a layer is cut into at least this many
// (when it has as many inputs) whatever the budget: up to 16 ranks get work on
// any layer, and the batches do not depend on the rank count, so that a rerun
// with another count reuses them. A batch costs no run of the layer, so small
// batches cost nothing but their files.
constexpr std::uint64_t kMinBatchesPerLayer = 16;

// A layer's targets in batches whose Hessians (8·in² bytes per input) and
// rounded weights (4·out·in per linear) fit `budget` bytes and 1/16 of the
// layer's; the readers of one input stay together, and an input larger than
// that is a batch of its own.
std::vector<LayerTargets> batches_within(const LayerTargets& mine, std::uint64_t budget) {
  std::map<std::string, LayerTargets> by_input;  // in first-reader order below
  std::vector<std::string> order;
  for (const auto& lt : mine) {
    const std::string key = input_key(lt.first->module);
    if (!by_input.contains(key)) order.push_back(key);
    by_input[key].push_back(lt);
  }
  const auto need = [&](const LayerTargets& readers) {
    const auto in = static_cast<std::uint64_t>(readers.front().first->in);
    std::uint64_t bytes = 8 * in * in;
    for (const auto& [l, t] : readers) bytes += 4 * static_cast<std::uint64_t>(l->out) * in;
    return bytes;
  };
  std::uint64_t total = 0;
  for (const auto& key : order) total += need(by_input[key]);
  const std::uint64_t share = (total + kMinBatchesPerLayer - 1) / kMinBatchesPerLayer;
  const std::uint64_t limit = budget > 0 ? std::min(budget, share) : share;
  std::vector<LayerTargets> batches(1);
  std::uint64_t bytes = 0;
  for (const auto& key : order) {
    const LayerTargets& readers = by_input[key];
    const std::uint64_t n = need(readers);
    if (!batches.back().empty() && bytes + n > limit) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().insert(batches.back().end(), readers.begin(), readers.end());
    bytes += n;
  }
  return batches;
}

std::vector<std::string> sources_of(const LayerTargets& batch) {
  std::vector<std::string> v;
  for (const auto& [l, t] : batch) v.push_back(t->tensor->source);
  return v;
}

// The layer's routed-token mean of x xᵀ over the inputs every routed expert's
// gate/up read (the MoE input, gathered per expert): what a rarely routed
// expert's Hessian is completed with. Empty when no such input is short of
// `prior` × in fit tokens, or none has any.
struct ExpertPrior {
  std::vector<double> mean;  // [in, in]: Σ x xᵀ / N over every recorded routed row
  std::int64_t in{0};
};

bool reads_moe_input(const Linear& l) {
  const auto e = parse_routed_expert(l.module);
  return e && (e->rest.ends_with("gate_proj") || e->rest.ends_with("up_proj") || e->rest == "w1" || e->rest == "w3");
}

ExpertPrior expert_prior(const LayerTargets& mine, const InputRecording& recording, double prior) {
  ExpertPrior p;
  if (prior <= 0) return p;
  std::vector<Linear*> readers;  // one per routed expert's MoE input
  std::set<std::string> seen;
  bool short_of_rows = false;
  for (const auto& [l, t] : mine)
    if (reads_moe_input(*l) && seen.insert(input_key(l->module)).second) {
      readers.push_back(l);
      short_of_rows |= static_cast<double>(recording.rows(*l, RecordedPart::Fit)) < prior * static_cast<double>(l->in);
    }
  if (readers.empty() || !short_of_rows) return p;
  p.in = readers.front()->in;
  InputHessians all({readers.front()});
  for (Linear* l : readers)
    recording.for_each_call(*l, RecordedPart::Fit, [&](const float* x, std::int64_t rows) { all.add(0, x, rows, p.in); });
  if (all.rows[0] == 0) return {};
  p.mean = std::move(all.h[0]);
  for (double& v : p.mean) v /= static_cast<double>(all.rows[0]);
  return p;
}

// Whether no linear after `l` in `batch` reads its input.
bool is_last_reader(const LayerTargets& batch, const Linear* l) {
  const std::string key = input_key(l->module);
  bool after = false;
  for (const auto& [m, t] : batch) {
    if (after && input_key(m->module) == key) return false;
    after |= m == l;
  }
  return true;
}

// GPTQ's weights of `l`, or the nearest rounding on the same grid where the gate
// (calibration/gptq_gate.h) measures less output error on the held-out rows `x`;
// the choice into `gate`.
std::vector<float> gated(GptqResult r, const TensorView& weight, const Linear& l, const std::string& module,
                         std::span<const float> x, std::int64_t held_out_rows, nlohmann::json& gate_record) {
  const Matrix m = load_matrix(weight, l.out, l.in);
  std::vector<float> w(static_cast<std::size_t>(l.out * l.in));
  for (std::int64_t row = 0; row < l.out; ++row) m.row_f32(row, w.data() + row * l.in);
  const GateChoice c = gate(w, r.weight, r.nearest, l.out, l.in, x, held_out_rows);
  gate_record[module] = {{"kept", c.gptq ? "gptq" : "nearest"},
                         {"gptq_error", c.gptq_error},
                         {"nearest_error", c.nearest_error},
                         {"held_out_rows", held_out_rows}};
  return c.gptq ? std::move(r.weight) : std::move(r.nearest);
}

// Rounds a batch into its file `path`: the rounded weights and the scale
// search's channel weights, with the batch's records as metadata. The
// Hessians are summed from the recording's fit rows of the batch's inputs
// alone; the gate reads their held-out rows.
void round_batch(const LayerTargets& batch, const InputRecording& recording, const ExpertPrior& prior,
                 const LayerRounding& r, const std::string& path, LayerRecord& record) {
  auto t0 = Clock::now();
  std::vector<Linear*> linears;
  for (const auto& [l, t] : batch) linears.push_back(l);
  InputHessians hs(linears);
  nlohmann::json pseudo = nlohmann::json::object();
  for (const auto& [l, s] : hs.slot) {
    recording.for_each_call(*l, RecordedPart::Fit, [&hs, l = l, s = s](const float* x, std::int64_t rows) {
      hs.add(s, x, rows, l->in);
    });
    // A rarely routed expert: its Hessian completed with pseudo-tokens of the layer's mean.
    const double want = r.expert_prior * static_cast<double>(l->in), have = static_cast<double>(hs.rows[s]);
    if (!prior.mean.empty() && reads_moe_input(*l) && l->in == prior.in && have < want) {
      std::vector<double>& h = hs.h[s];
      for (std::size_t i = 0; i < h.size(); ++i) h[i] += (want - have) * prior.mean[i];
      for (const auto& [m, t] : batch)
        if (input_key(m->module) == input_key(l->module)) pseudo[m->module] = want - have;
    }
  }
  record.hessian_s += since(t0);
  t0 = Clock::now();
  std::vector<io::TensorBytes> out;
  std::vector<std::string> unreached;
  // Per slot, shared by the readers of its input and dropped after the last: GPTQ's inverse, the held-out rows.
  std::map<std::size_t, GptqInverse> inverses;
  std::map<std::size_t, std::vector<float>> held_out;
  nlohmann::json gate_record = nlohmann::json::object(), tokens = nlohmann::json::object();
  for (const auto& [l, t] : batch) {
    const pipeline::PlannedTensor& pt = *t->tensor;
    const std::size_t slot = hs.of(*l);
    const std::int64_t held_rows = r.gate ? recording.rows(*l, RecordedPart::HeldOut) : 0;
    tokens[pt.module] = hs.rows[slot] + held_rows;
    GptqOptions go;
    go.dampening = r.dampening;
    go.quantize.global_amax = t->global_amax;
    const TensorView weight = r.source->view(pt.source);
    std::vector<float> q;
    if (hs.rows[slot] > 0 || pseudo.contains(pt.module)) {
      go.with_nearest = held_rows > 0;
      auto inv = inverses.find(slot);
      if (inv == inverses.end())
        inv = inverses.emplace(slot, gptq_inverse(hs.h[slot], l->in, r.dampening, pt.source)).first;
      GptqResult res = gptq_round(*pt.scheme, weight, hs.h[slot], go, &inv->second);
      if (go.with_nearest) {
        auto rows = held_out.find(slot);
        if (rows == held_out.end()) rows = held_out.emplace(slot, recording.gather(*l, RecordedPart::HeldOut)).first;
        q = gated(std::move(res), weight, *l, pt.module, rows->second, held_rows, gate_record);
      } else {
        q = std::move(res.weight);
      }
      if (is_last_reader(batch, l)) {
        inverses.erase(slot);
        held_out.erase(slot);
      }
      // The scale search's channel weights, for the writer to choose the same scales.
      out.push_back(f32_tensor(pipeline::RoundedWeights::channel_weights_name(pt.source),
                               hessian_diagonal(hs.h[slot], l->in), {l->in}));
    } else {
      q = mse_rounded(*pt.scheme, weight, go.quantize);  // no channel weights: mse
      unreached.push_back(pt.module);
    }
    out.push_back(rounded_tensor(pt.source, q, pt.source_info.shape));
  }
  record.solve_s += since(t0);
  t0 = Clock::now();
  // F32 tensors first, so that each starts 4-byte aligned for the mapped matrices.
  std::stable_partition(out.begin(), out.end(), [](const io::TensorBytes& t) { return t.info.dtype == DType::F32; });
  const std::map<std::string, std::string> metadata = {{"fingerprint", r.fingerprint},
                                                       {"tensors", joined(sources_of(batch))},
                                                       {"unreached", joined(unreached)},
                                                       {"gate", gate_record.dump()},
                                                       {"tokens", tokens.dump()},
                                                       {"prior", pseudo.dump()}};
  io::save_safetensors(path, out, metadata);
  record.write_s += since(t0);
}

// The batch file at `path` when a previous run of this fingerprint wrote it for exactly `batch`.
std::optional<std::map<std::string, std::string>> reusable(const std::string& path, const LayerTargets& batch,
                                                           const std::string& fingerprint) {
  if (!fs::exists(path)) return std::nullopt;
  const auto file = io::SafetensorsFile::open(path);
  const auto& md = file->metadata();
  const auto fp = md.find("fingerprint"), tensors = md.find("tensors");
  if (fp == md.end() || fp->second != fingerprint || tensors == md.end() || tensors->second != joined(sources_of(batch)))
    return std::nullopt;
  return md;
}

// Each target linear reads its rounded weights from its batch file's mapping
// (`files`: every batch file of the layer, opened once).
void map_rounded(const LayerTargets& mine, const LayerRecord& record,
                 const std::map<std::string, std::shared_ptr<const io::SafetensorsFile>>& files) {
  for (const auto& [l, t] : mine) {
    const auto& file = files.at(record.files.at(t->tensor->source));
    const TensorView v = file->view(t->tensor->source);
    const std::shared_ptr<const void> keep = file;
    l->weight = v.info->dtype == DType::BF16
                    ? Matrix::from_mapped_bf16(reinterpret_cast<const std::uint16_t*>(v.bytes.data()), l->out, l->in, keep)
                    : Matrix::from_mapped_f32(reinterpret_cast<const float*>(v.bytes.data()), l->out, l->in, keep);
  }
}

}  // namespace

void LayerRecord::absorb(const std::string& file, const std::map<std::string, std::string>& md) {
  for (const auto& t : split(md.at("tensors"))) files[t] = file;
  if (const auto it = md.find("unreached"); it != md.end() && !it->second.empty())
    for (auto& m : split(it->second)) unreached.push_back(std::move(m));
  if (const auto it = md.find("gate"); it != md.end()) gate.update(nlohmann::json::parse(it->second));
  if (const auto it = md.find("tokens"); it != md.end()) tokens.update(nlohmann::json::parse(it->second));
  if (const auto it = md.find("prior"); it != md.end()) prior.update(nlohmann::json::parse(it->second));
}

void LayerRecord::merge(const LayerRecord& o) {
  for (const auto& [t, f] : o.files) files[t] = f;
  unreached.insert(unreached.end(), o.unreached.begin(), o.unreached.end());
  gate.update(o.gate);
  tokens.update(o.tokens);
  prior.update(o.prior);
  record_s += o.record_s;
  hessian_s += o.hessian_s;
  solve_s += o.solve_s;
  write_s += o.write_s;
  batches += o.batches;
  reused += o.reused;
}

namespace {

// What rounding a batch costs, for sharing batches among ranks: its Hessians
// (fit rows × in²) and its solves (out × in² per linear).
std::uint64_t batch_cost(const LayerTargets& batch, const InputRecording& recording) {
  std::uint64_t cost = 0;
  std::set<std::string> inputs;
  for (const auto& [l, t] : batch) {
    const auto in2 = static_cast<std::uint64_t>(l->in) * static_cast<std::uint64_t>(l->in);
    cost += static_cast<std::uint64_t>(l->out) * in2;
    if (inputs.insert(input_key(l->module)).second)
      cost += static_cast<std::uint64_t>(recording.rows(*l, RecordedPart::Fit)) * in2;
  }
  return cost;
}

// Which rank rounds each batch (-1: a previous run's, reused): largest first
// onto the least-loaded rank, the same on every rank.
std::vector<int> batch_ranks(const std::vector<LayerTargets>& batches, const std::vector<char>& done,
                             const InputRecording& recording, int ranks) {
  std::vector<std::size_t> todo;
  std::vector<std::uint64_t> costs;
  for (std::size_t b = 0; b < batches.size(); ++b)
    if (!done[b]) {
      todo.push_back(b);
      costs.push_back(batch_cost(batches[b], recording));
    }
  std::vector<int> of(batches.size(), -1);
  const std::vector<int> assigned = dist::assign_largest_first(costs, ranks);
  for (std::size_t i = 0; i < todo.size(); ++i) of[todo[i]] = assigned[i];
  return of;
}

}  // namespace

LayerRecord round_layer(CausalLM& model, std::int64_t layer, const LayerTargets& mine,
                        const std::vector<std::span<const float>>& hidden, std::int64_t hidden_size,
                        const LayerRounding& r) {
  dist::Ranks& ranks = r.ranks ? *r.ranks : dist::ranks();
  const std::size_t total = r.total_sequences > 0 ? r.total_sequences : hidden.size();
  LayerRecord record;
  // The routed experts' prior (its in² doubles) stays for the whole layer: the batches get the rest.
  std::uint64_t reserve = 0;
  if (r.expert_prior > 0)
    for (const auto& [l, t] : mine)
      if (reads_moe_input(*l)) reserve = std::max<std::uint64_t>(reserve, 8 * static_cast<std::uint64_t>(l->in * l->in));
  const std::vector<LayerTargets> batches = batches_within(mine, r.budget > reserve ? r.budget - reserve : 1);
  record.batches = batches.size();
  std::vector<std::string> paths;
  std::vector<char> done(batches.size(), 0);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    paths.push_back(batch_file(r.work_dir, layer, b));
    if (reusable(paths.back(), batches[b], r.fingerprint)) {
      done[b] = 1;
      ++record.reused;
    }
  }
  ranks.barrier();  // every rank has seen the same batch files before any is written
  if (record.reused < batches.size()) {
    // The fit's sequences and the gate's (every eighth of all, when the gate is on and there are enough).
    std::vector<std::span<const float>> fit, held;
    for (std::size_t s = 0; s < hidden.size(); ++s)
      (r.gate && gate_holds_out(r.first_sequence + s, total) ? held : fit).push_back(hidden[s]);
    bool any_held = false;
    for (std::size_t s = 0; s < total; ++s) any_held |= r.gate && gate_holds_out(s, total);
    // Every target's input, the reused batches' too: the routed experts' prior is of them all.
    std::vector<Linear*> linears;
    for (const auto& [l, t] : mine) linears.push_back(l);
    const auto t0 = Clock::now();
    const auto recording_path = [&](int rank) {
      return (fs::path(r.work_dir) /
              (ranks.size() == 1 ? std::string("layer-inputs.f32") : fmt::format("layer-inputs.r{}.f32", rank)))
          .string();
    };
    InputRecording recording(recording_path(ranks.rank()), linears);
    record_layer_inputs(model, layer, recording, fit, held, hidden_size);
    recording.share(ranks, recording_path);
    record.record_s = since(t0);
    const auto tp = Clock::now();
    const ExpertPrior prior = expert_prior(mine, recording, r.expert_prior);
    record.hessian_s += since(tp);
    LayerRounding batch_rounding = r;
    batch_rounding.gate = any_held;
    const std::vector<int> rank_of = batch_ranks(batches, done, recording, ranks.size());
    for (std::size_t b = 0; b < batches.size(); ++b) {
      if (rank_of[b] != ranks.rank()) continue;
      const auto tb = Clock::now();
      round_batch(batches[b], recording, prior, batch_rounding, paths[b], record);
      // A line per batch under mpirun (which rank does what), else per batch of a second or more.
      if (r.on_progress && batches.size() > 1 && (ranks.size() > 1 || since(tb) >= 1.0))
        r.on_progress(fmt::format("gptq: {}layer {}: batch {}/{}: {} linear(s) rounded in {:.1f} s",
                                  dist::rank_prefix(), layer + 1, b + 1, batches.size(), batches[b].size(), since(tb)));
    }
    ranks.barrier();  // every batch file is written, and no rank reads another's recording any more
  }
  // Every batch's records in batch order, whichever rank or run wrote it; each file opened once.
  std::map<std::string, std::shared_ptr<const io::SafetensorsFile>> files;
  for (const auto& path : paths) {
    const auto& file = files[path] = io::SafetensorsFile::open(path);
    record.absorb(path, file->metadata());
  }
  // A previous run's files for other batches of this layer (another budget) go.
  if (ranks.rank() == 0) {
    const std::set<std::string> mine_files(paths.begin(), paths.end());
    for (const auto& f : layer_batch_files(r.work_dir, layer))
      if (!mine_files.contains(f)) fs::remove(f);
  }
  map_rounded(mine, record, files);
  return record;
}

LayerRecord finished_layer(const std::string& work_dir, std::int64_t layer) {
  LayerRecord record;
  for (const auto& f : layer_batch_files(work_dir, layer)) {
    record.absorb(f, io::SafetensorsFile::open(f)->metadata());
    ++record.batches;
    ++record.reused;
  }
  return record;
}

bool layer_files_match(const std::string& work_dir, const std::string& fingerprint, std::int64_t layer) {
  for (std::int64_t l = 0; l <= layer; ++l)
    for (const auto& f : layer_batch_files(work_dir, l))
      if (io::SafetensorsFile::open(f)->metadata().at("fingerprint") != fingerprint) return false;
  return true;
}

}  // namespace selq::calibration
