#include "calibration/gptq_pass.h"

#include <fmt/format.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <set>

#include "calibration/gptq.h"
#include "calibration/gptq_gate.h"
#include "calibration/gptq_states.h"
#include "calibration/input_hessians.h"
#include "core/error.h"
#include "core/machine.h"
#include "io/safetensors.h"
#include "io/xxh3.h"
#include "pipeline/manifest.h"
#include "quant/gptq_grid.h"
#include "quant/rounding_traits.h"
#include "quant/scheme.h"
#include "runtime/eval/eval.h"
#include "runtime/model/causal_lm.h"
#include "runtime/model/linear.h"
#include "runtime/text/calibration_text.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text

namespace fs = std::filesystem;

namespace {


std::string layer_file(std::int64_t layer) { return fmt::format("layer-{:04d}.safetensors", layer); }

// A linear the plan rounds gptq, in the model and in the plan.
struct Target {
  const pipeline::PlannedTensor* tensor;
  std::optional<float> global_amax;  // its NVFP4 fused group's
};

std::vector<std::vector<std::int32_t>> calibration_sequences(const std::string& dir, const GptqPassOptions& o,
                                                             nlohmann::json& provenance) {
  const DefaultText text = calibration_text(o.texts);
  std::vector<std::int32_t> toks = tokenizer_of(dir).encode(text.text);
  if (o.max_tokens > 0 && static_cast<std::int64_t>(toks.size()) > o.max_tokens)
    toks.resize(static_cast<std::size_t>(o.max_tokens));
  if (toks.size() < 2) throw_bad_input("rounding 'gptq': no calibration tokens", {text.source});
  if (o.context < 2) throw_bad_input(fmt::format("rounding 'gptq': context {} is too short", o.context));
  provenance = {{"text", text.source}, {"tokens", toks.size()}, {"context", o.context}, {"dampening", o.dampening}};
  std::vector<std::vector<std::int32_t>> seqs;
  for (std::size_t b = 0; b < toks.size(); b += static_cast<std::size_t>(o.context))
    seqs.emplace_back(toks.begin() + static_cast<std::ptrdiff_t>(b),
                      toks.begin() + static_cast<std::ptrdiff_t>(std::min(toks.size(), b + o.context)));
  return seqs;
}

// What the rounded weights depend on: the tokens, the targets and their
// schemes and group scales, the algorithm's settings, selq's version.
std::string fingerprint(const std::vector<std::vector<std::int32_t>>& seqs, const std::vector<Target>& targets,
                        const GptqPassOptions& o) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& s : seqs) {
    const std::uint64_t n = s.size();
    XXH3_64bits_update(st, &n, sizeof n);
    XXH3_64bits_update(st, s.data(), s.size() * sizeof(std::int32_t));
  }
  std::string text = fmt::format("gptq dampening {:a} block 128 scales weighted by diag(H) {}{}\n", o.dampening,
                                 SELQ_VERSION, o.gate ? fmt::format(" gate holding out 1 in {}", kGateHeldOutEvery) : "");
  for (const auto& t : targets)
    text += fmt::format("{} {} {}\n", t.tensor->source, t.tensor->scheme->name(),
                        t.global_amax ? fmt::format("{:a}", *t.global_amax) : "-");
  XXH3_64bits_update(st, text.data(), text.size());
  const std::uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return pipeline::hash_hex(h);
}

// Whether every layer file up to `layer` that exists is this run's: a layer
// file of another run means starting over.
bool layer_files_match(const std::string& dir, const std::string& fp, std::int64_t layer) {
  for (std::int64_t l = 0; l <= layer; ++l) {
    const std::string lf = (fs::path(dir) / layer_file(l)).string();
    if (fs::exists(lf) && io::SafetensorsFile::open(lf)->metadata().at("fingerprint") != fp) return false;
  }
  return true;
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

}  // namespace

std::string gptq_work_dir(const std::string& dst) { return dst + ".selq-gptq"; }

void use_gptq_pass(pipeline::QuantizeOptions& options, GptqPassOptions pass, const std::string& dst) {
  if (pass.work_dir.empty()) pass.work_dir = gptq_work_dir(dst);
  options.round_weights = [pass](const io::Checkpoint& source, const pipeline::Plan& plan) {
    if (pass.threads <= 0) return run_gptq_pass(source, plan, pass);
    tbb::task_arena arena(pass.threads);
    return arena.execute([&] { return run_gptq_pass(source, plan, pass); });
  };
}

void remove_gptq_work_dir(const std::string& dst) {
  std::error_code ec;
  fs::remove_all(gptq_work_dir(dst), ec);
}

namespace {

// The plan's gptq tensors by module, with the NVFP4 global amax of their fused
// group (as the writer computes it; only groups holding a gptq tensor are read).
std::map<std::string, Target> gptq_targets(const io::Checkpoint& source, const pipeline::Plan& plan) {
  const auto rounds_gptq = [](const pipeline::PlannedTensor& t) {
    return t.scheme && quant::rounding_input(t.scheme->rounding.value) == quant::RoundingInput::ModelPass;
  };
  std::map<std::string, float> group_amax;
  for (const auto& t : plan.tensors)
    if (rounds_gptq(t) && !t.fused_group.empty()) group_amax.emplace(t.fused_group, 0.0f);
  for (const auto& t : plan.tensors)
    if (t.scheme && group_amax.contains(t.fused_group)) {
      float& a = group_amax[t.fused_group];
      a = std::max(a, quant::tensor_amax(source.view(t.source)));
    }
  std::map<std::string, Target> by_module;
  for (const auto& t : plan.tensors)
    if (rounds_gptq(t))
      by_module[t.module] = {&t, t.fused_group.empty() ? std::nullopt : std::optional(group_amax.at(t.fused_group))};
  return by_module;
}

// Each layer's linears that the plan rounds gptq; refuses, before any work,
// a target that is no decoder layer's linear (a head, a router).
std::vector<std::vector<std::pair<Linear*, const Target*>>> targets_by_layer(
    CausalLM& model, const std::map<std::string, Target>& targets, const pipeline::Plan& plan) {
  std::vector<std::vector<std::pair<Linear*, const Target*>>> layers(static_cast<std::size_t>(model.layer_count()));
  std::size_t found = 0;
  for (std::int64_t layer = 0; layer < model.layer_count(); ++layer)
    for (Linear* l : model.layer_linears(layer))
      if (auto it = targets.find(l->module); it != targets.end()) {
        layers[static_cast<std::size_t>(layer)].emplace_back(l, &it->second);
        ++found;
      }
  if (found != targets.size())
    for (const auto& [module, t] : targets)
      if (!model.find_linear(module))
        throw_unsupported(fmt::format("rounding 'gptq': module '{}' is not a linear of a decoder layer the runtime "
                                      "runs (heads, embeddings and routers are not rounded by gptq); give its rule "
                                      "`rounding: mse`",
                                      module),
                          {plan.recipe_path, t.tensor->source});
  return layers;
}

using LayerTargets = std::vector<std::pair<Linear*, const Target*>>;

// A layer's targets in batches whose Hessians fit `budget` bytes (0: no
// bound); the readers of one input stay together, and an input larger than
// the budget is a batch of its own.
std::vector<LayerTargets> hessian_batches(const LayerTargets& mine, std::uint64_t budget) {
  std::vector<LayerTargets> batches(1);
  std::uint64_t bytes = 0;
  std::map<std::string, LayerTargets> by_input;  // in first-reader order below
  std::vector<std::string> order;
  for (const auto& lt : mine) {
    const std::string key = input_key(lt.first->module);
    if (!by_input.contains(key)) order.push_back(key);
    by_input[key].push_back(lt);
  }
  for (const auto& key : order) {
    const LayerTargets& readers = by_input[key];
    const auto in = static_cast<std::uint64_t>(readers.front().first->in);
    if (budget > 0 && !batches.back().empty() && bytes + 8 * in * in > budget) {
      batches.emplace_back();
      bytes = 0;
    }
    batches.back().insert(batches.back().end(), readers.begin(), readers.end());
    bytes += 8 * in * in;
  }
  return batches;
}

// What a layer's rounding recorded beyond its weights: the modules no row
// reached (kUnreachedExpertGptqRule) and the gate's choice for each module.
struct LayerRecord {
  std::vector<std::string> unreached;
  nlohmann::json gate = nlohmann::json::object();
};

// GPTQ's weights of `l`, or the nearest rounding on the same grid where the gate
// (calibration/gptq_gate.h) measures less output error on the held-out Hessian `h`;
// the choice into `record`.
std::vector<float> gated(GptqResult r, const TensorView& weight, const Linear& l, const std::string& module,
                         std::span<const double> h, std::int64_t held_out_rows, LayerRecord& record) {
  const Matrix m = load_matrix(weight, l.out, l.in);
  std::vector<float> w(static_cast<std::size_t>(l.out * l.in));
  for (std::int64_t row = 0; row < l.out; ++row) m.row_f32(row, w.data() + row * l.in);
  const GateChoice c = gate(w, r.weight, r.nearest, l.out, l.in, h);
  record.gate[module] = {{"kept", c.gptq ? "gptq" : "nearest"},
                         {"gptq_error", c.gptq_error},
                         {"nearest_error", c.nearest_error},
                         {"held_out_rows", held_out_rows}};
  return c.gptq ? std::move(r.weight) : std::move(r.nearest);
}

// Rounds a batch of a layer's targets into `rounded` (swapped into the model
// once the whole layer is done), as the tensors of its file: the rounded
// weights and the scale search's channel weights. `held_out`: the gate's
// Hessians (none: no gate).
std::vector<io::TensorBytes> round_batch(const io::Checkpoint& source, const LayerTargets& mine, const InputHessians& hs,
                                         const InputHessians* held_out, double dampening, LayerRecord& record,
                                         std::vector<std::pair<Linear*, Matrix>>& rounded) {
  std::vector<io::TensorBytes> out;
  for (const auto& [l, t] : mine) {
    const pipeline::PlannedTensor& pt = *t->tensor;
    const std::size_t slot = hs.of(*l);
    GptqOptions go;
    go.dampening = dampening;
    go.quantize.global_amax = t->global_amax;
    std::vector<float> q;
    if (hs.rows[slot] > 0) {
      const TensorView weight = source.view(pt.source);
      const std::size_t ho = held_out ? held_out->of(*l) : 0;
      go.with_nearest = held_out && held_out->rows[ho] > 0;
      GptqResult r = gptq_round(*pt.scheme, weight, hs.h[slot], go);
      q = go.with_nearest ? gated(std::move(r), weight, *l, pt.module, held_out->h[ho], held_out->rows[ho], record)
                          : std::move(r.weight);
      // The scale search's channel weights, for the writer to choose the same scales.
      out.push_back(f32_tensor(pipeline::RoundedWeights::channel_weights_name(pt.source),
                               hessian_diagonal(hs.h[slot], l->in), {l->in}));
    } else {
      q = mse_rounded(*pt.scheme, source.view(pt.source), go.quantize);  // no channel weights: mse
      record.unreached.push_back(pt.module);
    }
    out.push_back(f32_tensor(pt.source, q, pt.source_info.shape));
    rounded.emplace_back(l, Matrix::from_f32(std::move(q), l->out, l->in));
  }
  return out;
}

// Rounds a layer's targets: each batch's Hessians gathered with the layer's
// weights as they were (none is swapped before the last batch), so the
// batches give what one batch would.
std::vector<io::TensorBytes> round_layer(CausalLM& model, std::int64_t layer, const io::Checkpoint& source,
                                         const LayerTargets& mine, const std::vector<std::span<const float>>& hidden,
                                         std::int64_t hidden_size, const GptqPassOptions& options,
                                         LayerRecord& record) {
  std::vector<io::TensorBytes> out;
  std::vector<std::pair<Linear*, Matrix>> rounded;
  // The fit's sequences and the gate's (every eighth, when the gate is on and there are enough).
  std::vector<std::span<const float>> fit, held;
  for (std::size_t s = 0; s < hidden.size(); ++s)
    (options.gate && gate_holds_out(s, hidden.size()) ? held : fit).push_back(hidden[s]);
  // The held-out Hessians take as many bytes again: the batches are made for both.
  const std::uint64_t budget = (options.hessian_budget > 0 ? options.hessian_budget : physical_memory_bytes() / 2) /
                               (held.empty() ? 1 : 2);
  for (const LayerTargets& batch : hessian_batches(mine, budget)) {
    std::vector<Linear*> linears;
    for (const auto& [l, t] : batch) linears.push_back(l);
    const InputHessians hs = gather_hessians(model, layer, linears, fit, hidden_size);
    std::optional<InputHessians> ho;
    if (!held.empty()) ho.emplace(gather_hessians(model, layer, linears, held, hidden_size));
    for (auto& t : round_batch(source, batch, hs, ho ? &*ho : nullptr, options.dampening, record, rounded))
      out.push_back(std::move(t));
  }
  for (auto& [l, w] : rounded) l->weight = std::move(w);
  return out;
}

std::size_t kept_nearest(const nlohmann::json& gate) {
  std::size_t n = 0;
  for (const auto& [m, c] : gate.items()) n += c.at("kept") == "nearest";
  return n;
}

// The manifest's record of the gate: its rule, the sequences it held out, and per module its choice.
nlohmann::json gate_provenance(const GptqPassOptions& o, std::size_t sequences, const nlohmann::json& modules) {
  std::size_t held = 0;
  for (std::size_t s = 0; s < sequences; ++s) held += o.gate && gate_holds_out(s, sequences);
  nlohmann::json g = {{"rule", held > 0 ? std::string(kGptqGateRule)
                                         : o.gate ? fmt::format("off: fewer than {} calibration sequences to hold one out",
                                                                kGateHeldOutEvery)
                                                  : std::string("off: turned off")},
                      {"held_out_sequences", held}};
  if (held > 0) {
    const std::size_t nearest = kept_nearest(modules);
    g["kept_gptq"] = modules.size() - nearest;
    g["kept_nearest"] = nearest;
    g["modules"] = modules;
  }
  return g;
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

}  // namespace

std::shared_ptr<const pipeline::RoundedWeights> run_gptq_pass(const io::Checkpoint& source, const pipeline::Plan& plan,
                                                              const GptqPassOptions& options) {
  if (source.is_remote())
    throw_unsupported("rounding 'gptq' runs the model from a local checkpoint; download it first", {source.dir()});
  const std::map<std::string, Target> targets = gptq_targets(source, plan);
  auto model = load_model(source.dir());
  const auto by_layer = targets_by_layer(*model, targets, plan);
  const std::int64_t layers = model->layer_count(), hidden_size = model->hidden_size();
  nlohmann::json provenance;
  const auto seqs = calibration_sequences(source.dir(), options, provenance);
  std::vector<Target> target_list;
  for (const auto& [m, t] : targets) target_list.push_back(t);
  const std::string fp = fingerprint(seqs, target_list, options);
  provenance["fingerprint"] = fp;

  fs::create_directories(options.work_dir);
  std::vector<std::size_t> lengths;
  for (const auto& s : seqs) lengths.push_back(s.size());
  LayerStates states(options.work_dir, fp, lengths, hidden_size);
  std::int64_t done = states.resume();
  if (done >= 0 && !layer_files_match(options.work_dir, fp, done)) done = -1;
  if (done < 0)
    for (std::size_t s = 0; s < seqs.size(); ++s) states.set(s, model->embed(seqs[s]));
  const auto run_on = [&](std::int64_t layer) {  // the sequences on through the layer as it now is
    states.advance(layer, [&](std::size_t s, float* x) {
      model->forward_layer(layer, x, static_cast<std::int64_t>(seqs[s].size()));
    });
  };

  std::map<std::string, std::string> files;  // source tensor -> its layer file
  std::vector<std::string> unreached;        // linears rounded by mse for want of input rows
  nlohmann::json gate = nlohmann::json::object();  // module -> the gate's choice
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    const auto start = std::chrono::steady_clock::now();
    const std::string path = (fs::path(options.work_dir) / layer_file(layer)).string();
    const auto& mine = by_layer[static_cast<std::size_t>(layer)];
    for (const auto& [l, t] : mine) files[t->tensor->source] = path;
    if (!mine.empty() && layer <= done) {  // a previous run's layer: what it could not reach
      const auto file = io::SafetensorsFile::open(path);
      const auto& md = file->metadata();
      if (const auto it = md.find("unreached"); it != md.end() && !it->second.empty())
        for (auto& m : split(it->second)) unreached.push_back(std::move(m));
      if (const auto it = md.find("gate"); it != md.end()) gate.update(nlohmann::json::parse(it->second));
    }
    if (layer <= done) continue;
    if (mine.empty()) {
      run_on(layer);
      continue;
    }
    LayerRecord record;
    const std::vector<io::TensorBytes> rounded =
        round_layer(*model, layer, source, mine, states.inputs(), hidden_size, options, record);
    const std::vector<std::string>& missed = record.unreached;
    io::save_safetensors(path, rounded,
                         {{"fingerprint", fp}, {"unreached", joined(missed)}, {"gate", record.gate.dump()}});
    gate.update(record.gate);
    const std::size_t nearest_kept = kept_nearest(record.gate);
    run_on(layer);
    // The sequences are past this layer and its file holds the rounded weights
    // for the writer: drop them, so the pass holds one layer's at a time.
    for (const auto& [l, t] : mine) l->weight = Matrix{};
    if (options.on_progress)
      options.on_progress(fmt::format(
          "gptq: layer {}/{}: {} linear(s) rounded in {:.1f} s{}{}", layer + 1, layers, mine.size(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          missed.empty() ? "" : fmt::format(" ({} that no calibration token reached: by mse alone)", missed.size()),
          nearest_kept == 0 ? "" : fmt::format(", {} kept the nearest rounding (the gate)", nearest_kept)));
    unreached.insert(unreached.end(), missed.begin(), missed.end());
  }
  if (!unreached.empty()) {
    provenance["unreached"] = unreached;
    provenance["unreached_rule"] = kUnreachedExpertGptqRule;
  }
  provenance["gate"] = gate_provenance(options, seqs.size(), gate);
  return std::make_shared<const pipeline::RoundedWeights>(files, fp, std::move(provenance));
}

}  // namespace selq::calibration
