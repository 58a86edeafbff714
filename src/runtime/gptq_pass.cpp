#include "runtime/gptq_pass.h"

#include <fmt/format.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>

#include "core/error.h"
#include "io/safetensors.h"
#include "io/xxh3.h"
#include "pipeline/manifest.h"
#include "quant/gptq_grid.h"
#include "quant/scheme.h"
#include "recipe/fused_modules.h"
#include "runtime/blas.h"
#include "runtime/causal_lm.h"
#include "runtime/default_text.h"
#include "runtime/eval.h"
#include "runtime/gptq.h"

namespace selq::runtime {

namespace fs = std::filesystem;

namespace {

constexpr const char* kHiddenFile = "hidden.safetensors";
constexpr std::int64_t kHessianPanel = 256;  // columns of H per task: fixed, so sums do not depend on threads

std::string layer_file(std::int64_t layer) { return fmt::format("layer-{:04d}.safetensors", layer); }

// A linear the plan rounds gptq, in the model and in the plan.
struct Target {
  const pipeline::PlannedTensor* tensor;
  std::optional<float> global_amax;  // its NVFP4 fused group's
};

// Σ x xᵀ of each gathered linear's input rows, in double; a linear whose
// input another one of its fused module reads too takes that one's.
struct Hessians {
  std::map<const Linear*, std::size_t> slot;
  std::vector<std::vector<double>> h;
  std::vector<std::int64_t> rows;  // per slot: the input rows gathered (a routed expert may get none)
  std::vector<float> panel;

  static void hook(void* ctx, const Linear& l, const float* x, std::int64_t rows) {
    auto& self = *static_cast<Hessians*>(ctx);
    const auto it = self.slot.find(&l);
    if (it == self.slot.end() || rows == 0) return;
    std::vector<double>& h = self.h[it->second];
    self.rows[it->second] += rows;
    const std::int64_t n = l.in;
    self.panel.resize(static_cast<std::size_t>(n * n));
    float* p = self.panel.data();
    const std::int64_t panels = (n + kHessianPanel - 1) / kHessianPanel;
    tbb::parallel_for(std::int64_t{0}, panels, [&](std::int64_t k) {
      const std::int64_t j0 = k * kHessianPanel, w = std::min(kHessianPanel, n - j0);
      blas::sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(w),
                  static_cast<int>(rows), 1.0f, x, static_cast<int>(n), x + j0, static_cast<int>(n), 0.0f, p + j0,
                  static_cast<int>(n));
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = j0; j < j0 + w; ++j) h[static_cast<std::size_t>(i * n + j)] += p[i * n + j];
    });
  }
};

std::vector<std::vector<std::int32_t>> calibration_sequences(const std::string& dir, const GptqPassOptions& o,
                                                             nlohmann::json& provenance) {
  const DefaultText text = text_or_default(o.text_path, DefaultTextUse::Calibration);
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
  std::string text = fmt::format("gptq dampening {:a} block 128 scales weighted by diag(H) {}\n", o.dampening, SELQ_VERSION);
  for (const auto& t : targets)
    text += fmt::format("{} {} {}\n", t.tensor->source, t.tensor->scheme->name(),
                        t.global_amax ? fmt::format("{:a}", *t.global_amax) : "-");
  XXH3_64bits_update(st, text.data(), text.size());
  const std::uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return pipeline::hash_hex(h);
}

// The last layer a previous run with this fingerprint finished, and the
// hidden states it left; -1 when none.
std::int64_t resume_point(const std::string& dir, const std::string& fp, std::vector<std::vector<float>>& hidden) {
  const std::string path = (fs::path(dir) / kHiddenFile).string();
  if (!fs::exists(path)) return -1;
  const auto f = io::SafetensorsFile::open(path);
  const auto& md = f->metadata();
  const auto it = md.find("fingerprint");
  if (it == md.end() || it->second != fp) return -1;
  for (std::size_t s = 0; s < hidden.size(); ++s) {
    const TensorView v = f->view(fmt::format("sequence.{}", s));
    if (v.bytes.size() != hidden[s].size() * 4) return -1;
    std::memcpy(hidden[s].data(), v.bytes.data(), v.bytes.size());
  }
  const std::int64_t layer = std::stoll(md.at("layer"));
  for (std::int64_t l = 0; l <= layer; ++l) {  // a layer file of another run: start over
    const std::string lf = (fs::path(dir) / layer_file(l)).string();
    if (fs::exists(lf) && io::SafetensorsFile::open(lf)->metadata().at("fingerprint") != fp) return -1;
  }
  return layer;
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

std::shared_ptr<const pipeline::RoundedWeights> run_gptq_pass(const io::Checkpoint& source, const pipeline::Plan& plan,
                                                              const GptqPassOptions& options) {
  if (source.is_remote())
    throw_unsupported("rounding 'gptq' runs the model from a local checkpoint; download it first", {source.dir()});
  // The targets, with the NVFP4 global amax of their fused group (as the writer computes it).
  std::map<std::string, float> group_amax;
  for (const auto& t : plan.tensors)
    if (t.scheme && !t.fused_group.empty()) {
      float& a = group_amax[t.fused_group];
      a = std::max(a, quant::tensor_amax(source.view(t.source)));
    }
  std::map<std::string, Target> by_module;
  for (const auto& t : plan.tensors)
    if (t.scheme && t.scheme->rounding.value == quant::Rounding::Gptq)
      by_module[t.module] = {&t, t.fused_group.empty() ? std::nullopt : std::optional(group_amax.at(t.fused_group))};
  std::vector<Target> targets;
  for (const auto& [m, t] : by_module) targets.push_back(t);

  auto model = load_model(source.dir());
  const std::int64_t layers = model->layer_count(), hidden_size = model->hidden_size();
  nlohmann::json provenance;
  const auto seqs = calibration_sequences(source.dir(), options, provenance);
  const std::string fp = fingerprint(seqs, targets, options);
  provenance["fingerprint"] = fp;

  fs::create_directories(options.work_dir);
  std::vector<std::vector<float>> hidden(seqs.size());
  for (std::size_t s = 0; s < seqs.size(); ++s) hidden[s].resize(seqs[s].size() * static_cast<std::size_t>(hidden_size));
  std::int64_t done = resume_point(options.work_dir, fp, hidden);
  if (done < 0)
    for (std::size_t s = 0; s < seqs.size(); ++s) hidden[s] = model->embed(seqs[s]);

  std::map<std::string, std::string> files;  // source tensor -> its layer file
  std::vector<std::string> unreached;        // linears rounded by mse for want of inputs (this run's layers)
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    const auto start = std::chrono::steady_clock::now();
    const std::string path = (fs::path(options.work_dir) / layer_file(layer)).string();
    std::vector<std::pair<Linear*, const Target*>> mine;
    for (Linear* l : model->layer_linears(layer))
      if (auto it = by_module.find(l->module); it != by_module.end()) mine.emplace_back(l, &it->second);
    for (const auto& [l, t] : mine) files[t->tensor->source] = path;
    if (layer <= done || mine.empty()) {
      if (layer > done)  // nothing to round here: the sequences go on through it
        for (std::size_t s = 0; s < seqs.size(); ++s) model->forward_layer(layer, hidden[s].data(), static_cast<std::int64_t>(seqs[s].size()));
      continue;
    }
    // The Hessians, one per input (a fused module's members share the first's).
    Hessians hs;
    std::map<std::string, std::size_t> slot_of_input;
    for (const auto& [l, t] : mine) {
      const std::string key = recipe::fused_shard_key(l->module);
      const std::string input = key.empty() ? l->module : key;
      auto [it, fresh] = slot_of_input.emplace(input, hs.h.size());
      if (fresh) {
        hs.h.emplace_back(static_cast<std::size_t>(l->in * l->in), 0.0);
        hs.rows.push_back(0);
        hs.slot[l] = it->second;
      }
    }
    model->set_activation_hook(&Hessians::hook, &hs);
    for (std::size_t s = 0; s < seqs.size(); ++s) {
      std::vector<float> x = hidden[s];
      model->forward_layer(layer, x.data(), static_cast<std::int64_t>(seqs[s].size()));
    }
    model->set_activation_hook(nullptr, nullptr);
    // Round, write the layer's file, and run the sequences on through the rounded layer.
    std::vector<io::TensorBytes> rounded;
    std::int64_t unreached_here = 0;
    for (const auto& [l, t] : mine) {
      const pipeline::PlannedTensor& pt = *t->tensor;
      const std::string key = recipe::fused_shard_key(l->module);
      const std::size_t slot = slot_of_input.at(key.empty() ? l->module : key);
      GptqOptions go;
      go.dampening = options.dampening;
      go.quantize.global_amax = t->global_amax;
      std::vector<float> q;
      if (hs.rows[slot] > 0) {
        q = gptq_round(*pt.scheme, source.view(pt.source), hs.h[slot], go).weight;
        // The scale search's channel weights, for the writer to choose the same scales.
        rounded.push_back(f32_tensor(pipeline::RoundedWeights::channel_weights_name(pt.source),
                                     hessian_diagonal(hs.h[slot], l->in), {l->in}));
      } else {  // kUnreachedExpertGptqRule
        q = mse_rounded(*pt.scheme, source.view(pt.source), go.quantize);  // no channel weights: mse
        unreached.push_back(pt.module);
        ++unreached_here;
      }
      rounded.push_back(f32_tensor(pt.source, q, pt.source_info.shape));
      l->weight = Matrix::from_f32(std::move(q), l->out, l->in);
    }
    io::save_safetensors(path, rounded, {{"fingerprint", fp}});
    for (std::size_t s = 0; s < seqs.size(); ++s)
      model->forward_layer(layer, hidden[s].data(), static_cast<std::int64_t>(seqs[s].size()));
    std::vector<io::TensorBytes> state;
    for (std::size_t s = 0; s < seqs.size(); ++s)
      state.push_back(f32_tensor(fmt::format("sequence.{}", s), hidden[s],
                                 {static_cast<std::int64_t>(seqs[s].size()), hidden_size}));
    io::save_safetensors((fs::path(options.work_dir) / kHiddenFile).string(), state,
                         {{"fingerprint", fp}, {"layer", std::to_string(layer)}});
    if (options.on_progress)
      options.on_progress(fmt::format(
          "gptq: layer {}/{}: {} linear(s) rounded in {:.1f} s{}", layer + 1, layers, mine.size(),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
          unreached_here ? fmt::format(" ({} of routed experts no calibration token reached: mse)", unreached_here)
                         : ""));
  }
  for (const auto& t : targets)
    if (!files.contains(t.tensor->source))
      throw_unsupported(fmt::format("rounding 'gptq': module '{}' is not a linear of a decoder layer the runtime "
                                    "runs (the head and embeddings are not rounded by gptq); give its rule "
                                    "`rounding: mse`",
                                    t.tensor->module),
                        {plan.recipe_path, t.tensor->source});
  if (!unreached.empty()) {
    provenance["unreached"] = unreached;
    provenance["unreached_rule"] = kUnreachedExpertGptqRule;
  }
  return std::make_shared<const pipeline::RoundedWeights>(files, fp, std::move(provenance));
}

}  // namespace selq::runtime
