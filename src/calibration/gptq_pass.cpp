#include "calibration/gptq_pass.h"

#include <fmt/format.h>
#include <tbb/task_arena.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <optional>

#include "calibration/gptq_gate.h"
#include "calibration/gptq_layer.h"
#include "calibration/gptq_states.h"
#include "core/error.h"
#include "core/machine.h"
#include "dist/assign.h"
#include "dist/ranks.h"
#include "io/xxh3.h"
#include "pipeline/manifest.h"
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

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

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
std::string fingerprint(const std::vector<std::vector<std::int32_t>>& seqs, const std::vector<GptqTarget>& targets,
                        const GptqPassOptions& o) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& s : seqs) {
    const std::uint64_t n = s.size();
    XXH3_64bits_update(st, &n, sizeof n);
    XXH3_64bits_update(st, s.data(), s.size() * sizeof(std::int32_t));
  }
  std::string text = fmt::format("gptq dampening {:a} block 128 scales weighted by diag(H) {}{}{}\n", o.dampening,
                                 SELQ_VERSION, o.gate ? fmt::format(" gate holding out 1 in {}", kGateHeldOutEvery) : "",
                                 o.expert_prior > 0 ? fmt::format(" expert prior {:a}", o.expert_prior) : "");
  for (const auto& t : targets)
    text += fmt::format("{} {} {}\n", t.tensor->source, t.tensor->scheme->name(),
                        t.global_amax ? fmt::format("{:a}", *t.global_amax) : "-");
  XXH3_64bits_update(st, text.data(), text.size());
  const std::uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return pipeline::hash_hex(h);
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
  if (dist::ranks().rank() != 0) return;  // under mpirun, once: the ranks share the directory
  std::error_code ec;
  fs::remove_all(gptq_work_dir(dst), ec);
}

namespace {

// The plan's gptq tensors by module, with the NVFP4 global amax of their fused
// group (as the writer computes it; only groups holding a gptq tensor are read).
std::map<std::string, GptqTarget> gptq_targets(const io::Checkpoint& source, const pipeline::Plan& plan) {
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
  std::map<std::string, GptqTarget> by_module;
  for (const auto& t : plan.tensors)
    if (rounds_gptq(t))
      by_module[t.module] = {&t, t.fused_group.empty() ? std::nullopt : std::optional(group_amax.at(t.fused_group))};
  return by_module;
}

// Each layer's linears that the plan rounds gptq; refuses, before any work,
// a target that is no decoder layer's linear (a head, a router).
std::vector<std::vector<std::pair<Linear*, const GptqTarget*>>> targets_by_layer(
    CausalLM& model, const std::map<std::string, GptqTarget>& targets, const pipeline::Plan& plan) {
  std::vector<std::vector<std::pair<Linear*, const GptqTarget*>>> layers(static_cast<std::size_t>(model.layer_count()));
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

// The progress line of a finished layer: what it rounded and where the time went.
std::string layer_line(std::int64_t layer, std::int64_t layers, std::size_t linears, const LayerRecord& record,
                       double total_s, double run_s) {
  if (linears == 0)
    return fmt::format("gptq: layer {}/{}: no gptq linear, run through in {:.1f} s", layer + 1, layers, total_s);
  std::string line = fmt::format(
      "gptq: layer {}/{}: {} linear(s) rounded in {:.1f} s ({}; recording {:.1f} s, Hessians {:.1f} s, solves "
      "{:.1f} s, writes {:.1f} s, run through {:.1f} s)",
      layer + 1, layers, linears, total_s,
      fmt::format("{} batch{}{}", record.batches, record.batches == 1 ? "" : "es",
                  record.reused > 0 ? fmt::format(", {} from a previous run", record.reused) : ""),
      record.record_s,
      record.hessian_s, record.solve_s, record.write_s, run_s);
  if (!record.unreached.empty())
    line += fmt::format(" ({} that no calibration token reached: by mse alone)", record.unreached.size());
  if (const std::size_t nearest = kept_nearest(record.gate); nearest > 0)
    line += fmt::format(", {} kept the nearest rounding (the gate)", nearest);
  return line;
}

// The last finished layer every rank resumes after: each rank's own states
// (a rank that stopped earlier, or a rerun with another rank count, starts
// them all from the embeddings; the finished layers' batch files are reused,
// so that costs runs through them, not solves), or -1.
std::int64_t agreed_resume(dist::Ranks& ranks, std::int64_t mine, const std::string& work_dir,
                           const std::string& fingerprint) {
  if (mine >= 0 && !layer_files_match(work_dir, fingerprint, mine)) mine = -1;
  std::vector<float> bounds = {static_cast<float>(mine), -static_cast<float>(mine)};  // max and -min, exact
  ranks.max_floats(bounds);
  return bounds[0] == -bounds[1] ? mine : -1;
}

}  // namespace

std::shared_ptr<const pipeline::RoundedWeights> run_gptq_pass(const io::Checkpoint& source, const pipeline::Plan& plan,
                                                              const GptqPassOptions& options) {
  if (source.is_remote())
    throw_unsupported("rounding 'gptq' runs the model from a local checkpoint; download it first", {source.dir()});
  const std::map<std::string, GptqTarget> targets = gptq_targets(source, plan);
  auto model = load_model(source.dir());
  const auto by_layer = targets_by_layer(*model, targets, plan);
  const std::int64_t layers = model->layer_count(), hidden_size = model->hidden_size();
  nlohmann::json provenance;
  const auto seqs = calibration_sequences(source.dir(), options, provenance);
  std::vector<GptqTarget> target_list;
  for (const auto& [m, t] : targets) target_list.push_back(t);
  const std::string fp = fingerprint(seqs, target_list, options);
  provenance["fingerprint"] = fp;

  fs::create_directories(options.work_dir);
  // Under mpirun each rank runs a contiguous share of the sequences, its states in a directory of its own.
  dist::Ranks& ranks = dist::ranks();
  const dist::Share share = dist::contiguous_share(seqs.size(), ranks.rank(), ranks.size());
  const std::size_t first = share.first, last = share.last;  // named: the lambda below captures them
  std::string states_dir = options.work_dir;
  if (ranks.size() > 1) {
    states_dir = (fs::path(options.work_dir) / fmt::format("states-r{}of{}", ranks.rank(), ranks.size())).string();
    fs::create_directories(states_dir);
  }
  std::vector<std::size_t> lengths;
  for (std::size_t s = first; s < last; ++s) lengths.push_back(seqs[s].size());
  LayerStates states(states_dir, fp, lengths, hidden_size);
  const std::int64_t done = agreed_resume(ranks, states.resume(), options.work_dir, fp);
  if (done < 0)
    for (std::size_t s = first; s < last; ++s) states.set(s - first, model->embed(seqs[s]));
  const auto run_on = [&](std::int64_t layer) {  // this rank's sequences on through the layer as it now is
    states.advance(layer, [&](std::size_t s, float* x) {
      model->forward_layer(layer, x, static_cast<std::int64_t>(seqs[first + s].size()));
    });
  };

  LayerRounding rounding;
  rounding.source = &source;
  rounding.work_dir = options.work_dir;
  rounding.fingerprint = fp;
  rounding.gate = options.gate;
  rounding.dampening = options.dampening;
  rounding.expert_prior = options.expert_prior;
  rounding.budget = options.hessian_budget > 0 ? options.hessian_budget : physical_memory_bytes() / 2;
  rounding.on_progress = options.on_progress;
  rounding.ranks = &ranks;
  rounding.first_sequence = first;
  rounding.total_sequences = seqs.size();
  LayerRecord all;  // every layer's
  for (std::int64_t layer = 0; layer < layers; ++layer) {
    const auto start = std::chrono::steady_clock::now();
    const auto& mine = by_layer[static_cast<std::size_t>(layer)];
    if (layer <= done) {  // a previous run's layer
      if (!mine.empty()) all.merge(finished_layer(options.work_dir, layer));
      continue;
    }
    LayerRecord record;
    if (!mine.empty()) record = round_layer(*model, layer, mine, states.inputs(), hidden_size, rounding);
    const auto forward = std::chrono::steady_clock::now();
    run_on(layer);
    // The sequences are past this layer and its files hold the rounded weights
    // for the writer: the linears let go of their mappings.
    for (const auto& [l, t] : mine) l->weight = Matrix{};
    if (options.on_progress && ranks.rank() == 0)
      options.on_progress(layer_line(layer, layers, mine.size(), record, seconds_since(start), seconds_since(forward)));
    all.merge(record);
  }
  const std::vector<std::string>& unreached = all.unreached;
  if (!unreached.empty()) {
    provenance["unreached"] = unreached;
    provenance["unreached_rule"] = kUnreachedExpertGptqRule;
  }
  provenance["gate"] = gate_provenance(options, seqs.size(), all.gate);
  provenance["module_tokens"] = all.tokens;
  if (!all.prior.empty()) {
    provenance["expert_prior"] = all.prior;
    provenance["expert_prior_rule"] = fmt::format("{} (expert_prior {})", kRareExpertGptqRule, options.expert_prior);
  }
  return std::make_shared<const pipeline::RoundedWeights>(all.files, fp, std::move(provenance));
}

}  // namespace selq::calibration
