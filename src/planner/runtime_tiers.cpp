#include "planner/runtime_tiers.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "calibration/calibrate.h"
#include "calibration/gptq.h"
#include "core/error.h"
#include "export/module_names.h"
#include "quant/rounding_traits.h"
#include "quant/scheme_traits.h"
#include "recipe/fused_modules.h"
#include "runtime/eval/eval.h"
#include "runtime/model/stored_weight.h"
#include "runtime/text/text_overlap.h"
#include "runtime/text/tokenizer.h"

namespace selq::planner {
namespace {

runtime::Linear& linear_of(runtime::CausalLM& model, const std::string& module) {
  runtime::Linear* l = model.find_linear(module);
  if (!l) throw_unsupported(fmt::format("the runtime has no linear {} (the runtime tiers measure only the linears "
                                        "the runtime runs; the data-free tier measures any weight)",
                                        module));
  return *l;
}

// `l` with `weight` and the candidate's activation mode (dynamic modes only).
// The input amax a calibrated candidate's static scale comes from.
float calibrated_amax(const InputAmax& input_amax, const std::string& module, const Candidate& c) {
  const auto it = input_amax.find(module);
  if (it == input_amax.end() || !(it->second > 0.0f) || !std::isfinite(it->second))
    throw_bad_input(fmt::format("{}: {} has no positive input amax for this module in the calibration", module, c.id),
                    {}, ErrorHint::CalibrationFile);
  return it->second;
}

runtime::Linear with_candidate(const runtime::Linear& l, runtime::Matrix weight, const Candidate& c,
                               const InputAmax& input_amax) {
  runtime::Linear q;
  q.module = l.module;
  q.out = l.out;
  q.in = l.in;
  q.weight = std::move(weight);
  q.bias = l.bias;
  q.act = c.spec->act;
  q.act_rule = c.spec->scale_rule;
  if (c.calibrated()) q.act_static_scale = quant::static_scale_for_amax(q.act, calibrated_amax(input_amax, l.module, c));
  return q;
}

}  // namespace

std::vector<float> calibration_logprobs(runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                                        std::int64_t context) {
  double nll = 0;
  auto out = runtime::text_logprobs(model, tokens, runtime::windows(static_cast<std::int64_t>(tokens.size()), context),
                                    nll, [](std::uint64_t) {});
  model.reset();
  return out;
}

Divergence mean_divergence(const std::vector<float>& base, const std::vector<float>& q, std::int64_t vocab) {
  const std::int64_t positions = static_cast<std::int64_t>(base.size()) / vocab;
  Divergence d;
  for (std::int64_t p = 0; p < positions; ++p) {
    d.kl += runtime::kl_divergence(base.data() + p * vocab, q.data() + p * vocab, vocab);
    d.tv += 1.0 - runtime::overlap_probability(base.data() + p * vocab, q.data() + p * vocab, vocab);
  }
  if (positions > 0) {
    d.kl /= static_cast<double>(positions);
    d.tv /= static_cast<double>(positions);
  }
  return d;
}

namespace {

// Quantized tensors as the runtime holds a stored checkpoint's: by rows from
// the stored bytes where the scheme allows it (a 4-bit weight at its stored
// size: the measured tier swaps a layer's routed experts in at once), else
// dequantized to F32; the products are the same bits either way.
runtime::Matrix held_as_stored(const quant::SchemeSpec& spec, const Shape& shape,
                               const std::vector<std::span<std::uint8_t>>& outs,
                               const std::vector<std::uint8_t>& storage) {
  std::ptrdiff_t used = 0;
  for (const auto& o : outs) used = std::max(used, o.data() + o.size() - storage.data());
  auto held = std::make_shared<const std::vector<std::uint8_t>>(storage.begin(), storage.begin() + used);
  std::vector<std::span<const std::uint8_t>> kept;
  for (const auto& o : outs) kept.emplace_back(held->data() + (o.data() - storage.data()), o.size());
  if (auto w = runtime::StoredWeight::make(spec, shape, kept, held)) return runtime::Matrix::from_stored(std::move(w));
  return runtime::Matrix::from_f32(quant::dequantize_weight(spec, shape, kept), shape[0], shape[1]);
}

// One member's weights as `spec` rounds them: `weighted` with its
// input's second moments and `gptq` with its input's Hessian, both from
// `rounding`; a member no calibration row reached (an idle expert) is rounded
// by `mse`, as quantize's gptq pass rounds it (its output error counts no row).
runtime::Matrix rounded_member(quant::SchemeSpec spec, const TensorView& w, quant::TensorQuantizeOptions qopt,
                               const DecisionUnit& unit, const std::string& module, const Candidate& candidate,
                               RoundingInputs* rounding, std::vector<std::uint8_t>& storage) {
  if (candidate.rounds_with_calibration() && !rounding)
    throw_bad_input(fmt::format("candidate '{}' rounds with calibration rows: the activation-aware and measured "
                                "tiers score it, the data-free tier cannot",
                                candidate.id));
  std::vector<float> moments;
  const quant::RoundingTraits& row = quant::rounding_traits(spec.rounding.value);
  if (row.input == quant::RoundingInput::InputMoments) {
    moments = rounding->channel_weights(module);
    qopt.channel_weights = moments;
    if (moments.empty()) spec.rounding.value = row.without_input;
  } else if (row.input == quant::RoundingInput::ModelPass) {
    const auto h = unit.layer >= 0 ? rounding->hessian(unit.layer, module) : std::span<const double>{};
    if (!h.empty()) {
      calibration::GptqOptions go;
      go.quantize = qopt;
      return runtime::Matrix::from_f32(calibration::gptq_round(spec, w, h, go).weight, w.info->shape[0],
                                       w.info->shape[1]);
    }
    spec.rounding.value = row.without_input;
  }
  // Packing INT codes into int32 is storage alone (the same values); unpacked, they dequantize by rows.
  spec.int_pack_int32 = false;
  quant::ErrorMetrics em;
  return held_as_stored(spec, w.info->shape, quantize_to_buffer(spec, w, storage, em, qopt), storage);
}

// One candidate's rounding of a unit's members, one member at a time: a layer's
// routed experts are one unit, and at DeepSeek-V3's size (256 experts) their F32
// weights are 45 GB, so the tiers ask for each member in turn and hold it as stored.
class UnitRounder {
 public:
  UnitRounder(const UnitLayout& layout, const DecisionUnit& unit, const Candidate& candidate,
              runtime::CausalLM& model, RoundingInputs* rounding)
      : unit_(unit), candidate_(candidate), model_(model), rounding_(rounding), spec_(dialect_spec(layout, candidate)) {
    for (const auto& m : unit.members) {
      const auto& l = linear_of(model, m.module);
      infos_.push_back({m.module, plain(l.weight) && l.weight.is_bf16() ? DType::BF16 : DType::F32, {l.out, l.in}});
      std::string key = recipe::fused_shard_key(m.module);
      group_.push_back(key.empty() ? m.module : key);
    }
    // NVFP4 members of a fused group share the group's global amax.
    fused_amax_ = quant::scheme_traits(spec_.kind).fused_group_amax;
    if (fused_amax_)
      for (std::size_t i = 0; i < unit.members.size(); ++i) {
        std::vector<float> f32;
        float& a = group_amax_[group_[i]];
        a = std::max(a, quant::tensor_amax(view_of(i, f32)));
      }
  }

  // Member i's weights as the candidate rounds them (held_as_stored).
  runtime::Matrix member(std::size_t i) {
    std::vector<float> f32;
    quant::TensorQuantizeOptions qopt;
    if (fused_amax_) qopt.global_amax = group_amax_[group_[i]];
    return rounded_member(spec_, view_of(i, f32), qopt, unit_, unit_.members[i].module, candidate_, rounding_,
                          storage_);
  }

 private:
  // A weight held as stored or as FP8 factors is read through F32 (into `f32`).
  static bool plain(const runtime::Matrix& w) { return !w.is_stored() && w.row_scale.empty(); }
  TensorView view_of(std::size_t i, std::vector<float>& f32) const {  // the weight as the runtime holds it
    const auto& w = linear_of(model_, unit_.members[i].module).weight;
    if (!plain(w)) f32 = w.to_f32();
    const void* p = !plain(w)      ? static_cast<const void*>(f32.data())
                    : w.is_bf16() ? static_cast<const void*>(w.bf16.data())
                                  : static_cast<const void*>(w.f32.data());
    return TensorView{&infos_[i], std::span(static_cast<const std::uint8_t*>(p), infos_[i].nbytes())};
  }

  const DecisionUnit& unit_;
  const Candidate& candidate_;
  runtime::CausalLM& model_;
  RoundingInputs* rounding_;
  const quant::SchemeSpec spec_;
  std::vector<TensorInfo> infos_;
  std::vector<std::string> group_;
  bool fused_amax_{false};
  std::map<std::string, float> group_amax_;
  std::vector<std::uint8_t> storage_;
};

// plan --refine keeps +weighted and +gptq weights once made (RoundingInputs::keep_rounded), by unit and candidate.
bool keeps_rounded(const RoundingInputs* rounding, const Candidate& candidate) {
  return rounding && rounding->keep_rounded && candidate.rounds_with_calibration();
}
std::string memo_key(const DecisionUnit& unit, const Candidate& candidate) { return unit.name + "\n" + candidate.id; }

}  // namespace

std::vector<std::vector<float>> quantized_unit_weights(const UnitLayout& layout, const DecisionUnit& unit,
                                                       const Candidate& candidate, runtime::CausalLM& model,
                                                       RoundingInputs* rounding) {
  const std::string memo = memo_key(unit, candidate);
  const bool keep = keeps_rounded(rounding, candidate);
  if (keep)
    if (const auto it = rounding->rounded.find(memo); it != rounding->rounded.end()) return it->second;
  UnitRounder rounder(layout, unit, candidate, model, rounding);
  std::vector<std::vector<float>> out;
  for (std::size_t i = 0; i < unit.members.size(); ++i) out.push_back(rounder.member(i).to_f32());
  if (keep) rounding->rounded.emplace(memo, out);
  return out;
}

std::vector<runtime::Linear> swap_in_candidate(const UnitLayout& layout, const DecisionUnit& unit,
                                               const Candidate& candidate, runtime::CausalLM& model,
                                               const InputAmax& input_amax, RoundingInputs* rounding) {
  // Checked before any member is swapped, so that a refusal leaves the model as it was.
  if (candidate.calibrated())
    for (const auto& m : unit.members) calibrated_amax(input_amax, m.module, candidate);
  // Every member rounded before any is swapped in (a +gptq member's Hessian comes from the model as it was),
  // held as stored where the scheme allows (held_as_stored); plan --refine's kept weights as they were kept.
  std::vector<runtime::Matrix> qw;
  if (keeps_rounded(rounding, candidate)) {
    auto kept = quantized_unit_weights(layout, unit, candidate, model, rounding);
    for (std::size_t i = 0; i < kept.size(); ++i) {
      const auto& l = linear_of(model, unit.members[i].module);
      qw.push_back(runtime::Matrix::from_f32(std::move(kept[i]), l.out, l.in));
    }
  } else {
    UnitRounder rounder(layout, unit, candidate, model, rounding);
    for (std::size_t i = 0; i < unit.members.size(); ++i) qw.push_back(rounder.member(i));
  }
  std::vector<runtime::Linear> saved;
  for (std::size_t i = 0; i < unit.members.size(); ++i) {
    auto& l = linear_of(model, unit.members[i].module);
    runtime::Linear q = with_candidate(l, std::move(qw[i]), candidate, input_amax);
    saved.push_back(std::move(l));
    l = std::move(q);
  }
  return saved;
}

void swap_back(const DecisionUnit& unit, std::vector<runtime::Linear> saved, runtime::CausalLM& model) {
  for (std::size_t i = 0; i < unit.members.size(); ++i) linear_of(model, unit.members[i].module) = std::move(saved[i]);
}

std::int64_t rounding_tokens_for(const std::vector<Candidate>& candidates) {
  const bool rounds = std::any_of(candidates.begin(), candidates.end(),
                                  [](const Candidate& c) { return c.rounds_with_calibration(); });
  return rounds ? kRoundingTokens : 0;
}

CalibrationTokens calibration_tokens(const std::string& checkpoint_dir, const CalibrationText& text,
                                     std::int64_t rounding_tokens) {
  const runtime::Tokenizer tok = runtime::tokenizer_of(checkpoint_dir);
  CalibrationTokens out;
  out.tokens = tok.encode(text.text);
  if (text.tokens > 0 && static_cast<std::int64_t>(out.tokens.size()) > text.tokens) {
    const auto end = std::min(out.tokens.size(), static_cast<std::size_t>(text.tokens + rounding_tokens));
    out.rounding.assign(out.tokens.begin() + text.tokens, out.tokens.begin() + static_cast<std::ptrdiff_t>(end));
    out.tokens.resize(static_cast<std::size_t>(text.tokens));
  }
  if (out.tokens.empty()) throw_bad_input(fmt::format("{}: no tokens to calibrate on", text.source));
  if (static_cast<std::int64_t>(out.rounding.size()) < rounding_tokens)
    throw_bad_input(fmt::format("{}: +weighted and +gptq candidates round with the {} calibration tokens after the "
                                "{} scored, and the text has {} more; give a longer calibration text or score fewer "
                                "tokens",
                                text.source, rounding_tokens, out.tokens.size(), out.rounding.size()));
  std::vector<std::int32_t> all = out.tokens;
  all.insert(all.end(), out.rounding.begin(), out.rounding.end());
  out.provenance = runtime::text_provenance(
      text.source, std::string_view(text.text).substr(0, runtime::covered_bytes(tok, all, text.text.size())));
  return out;
}

namespace {

// The first `limit` input rows each unit member sees (fused members share
// their input, so a dense unit captures once; each routed expert sees its
// own tokens), and every linear's input amax over all tokens (as `selq
// calibrate` measures it).
struct Capture {
  std::map<std::string, std::vector<float>> rows;  // by the module whose input they are
  std::map<std::string, std::string> key;          // unit member -> its rows' module
  std::int64_t limit{0};
  InputAmax amax;
};

// Whose captured rows each member of `u` reads: a dense unit's members share
// their input (fused q/k/v, gate/up), so the first member's; a routed expert's
// gate and up read the same tokens, so the first of its fused shards'; its
// down_proj its own.
void add_capture_keys(const DecisionUnit& u, std::map<std::string, std::string>& key) {
  std::map<std::string, std::string> first_of_group;  // an expert's fused key -> its first member
  for (const auto& m : u.members) {
    if (!exporter::experts_parent(m.module)) {
      key[m.module] = u.members.front().module;
      continue;
    }
    const std::string group = recipe::fused_shard_key(m.module);
    key[m.module] = group.empty() ? m.module : first_of_group.emplace(group, m.module).first->second;
  }
}

void capture_input(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows) {
  auto& c = *static_cast<Capture*>(ctx);
  calibration::record_input_amax(c.amax, l, x, rows);
  auto it = c.rows.find(l.module);
  if (it == c.rows.end()) return;
  const std::int64_t have = static_cast<std::int64_t>(it->second.size()) / l.in;
  const std::int64_t take = std::min(rows, c.limit - have);
  if (take > 0) it->second.insert(it->second.end(), x, x + take * l.in);
}

Capture capture_inputs(const UnitLayout& layout, runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                       const RuntimeTierOptions& options) {
  Capture cap;
  cap.limit = options.rows;
  for (const auto& u : layout.units) add_capture_keys(u, cap.key);
  for (const auto& [member, key] : cap.key) cap.rows[key];
  model.set_activation_hook(capture_input, &cap);
  const auto n = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t b = 0; b < n; b += options.context) {
    model.reset();
    model.forward(std::span(tokens).subspan(static_cast<std::size_t>(b),
                                            static_cast<std::size_t>(std::min(options.context, n - b))),
                  false);
  }
  model.set_activation_hook(nullptr, nullptr);
  model.reset();
  return cap;
}

// The data-free tier cannot score a candidate that rounds with calibration
// rows: its entry is made here, for the units it applies to (gptq: linears of
// decoder layers, which the calibration runs layer by layer).
void add_calibrated_rounding_entries(const UnitLayout& layout, const DecisionUnit& unit,
                                     const std::vector<Candidate>& candidates, UnitSensitivity& us) {
  for (const auto& cand : candidates)
    if (cand.rounds_with_calibration() && !us.scores.count(cand.id) && unit_cost(layout, unit, cand) &&
        (cand.spec->rounding.value != quant::Rounding::Gptq || unit.layer >= 0))
      us.scores.emplace(cand.id, CandidateScore{});
}

// One candidate being scored on a unit, member by member: its output error,
// and ||W - Q||^2 / ||W||^2 (the data-free score of weights the data-free tier
// could not round). Under plan --refine (RoundingInputs::keep_rounded) the
// +weighted and +gptq weights are kept for the refinement, as
// quantized_unit_weights keeps them.
struct ScoredCandidate {
  const Candidate* candidate;
  CandidateScore* score;
  UnitRounder rounder;
  std::vector<std::vector<float>>* kept{nullptr};        // the memo's, when made already
  std::optional<std::vector<std::vector<float>>> keep;  // made here, for the memo
  double err{0}, weight_err{0}, weight_ref{0};

  runtime::Matrix member(std::size_t i, const runtime::Linear& l) {
    if (kept) return runtime::Matrix::from_f32((*kept)[i], l.out, l.in);
    runtime::Matrix q = rounder.member(i);
    if (keep) keep->push_back(q.to_f32());
    return q;
  }
};

// One unit's captured inputs; then, one member at a time, its reference output
// and each candidate's output error through a Linear with its weights and
// activation mode, as the runtime would run it (a member's weights at a time:
// the unit's routed experts together would not fit in memory at full size).
void score_unit_outputs(const UnitLayout& layout, const DecisionUnit& unit, const std::vector<Candidate>& candidates,
                        runtime::CausalLM& model, const Capture& cap, RoundingInputs* rounding,
                        UnitSensitivity& us) {
  add_calibrated_rounding_entries(layout, unit, candidates, us);
  // Members no calibration token reached (an idle expert) are left out.
  std::vector<const std::vector<float>*> xs;
  std::vector<std::int64_t> rows;
  for (const auto& m : unit.members) {
    xs.push_back(&cap.rows.at(cap.key.at(m.module)));
    rows.push_back(static_cast<std::int64_t>(xs.back()->size()) / linear_of(model, m.module).in);
  }
  if (std::all_of(rows.begin(), rows.end(), [](std::int64_t r) { return r == 0; }))
    throw_bad_input(fmt::format("no calibration rows reached {}", unit.name));
  std::vector<ScoredCandidate> scored;
  scored.reserve(candidates.size());
  for (const auto& cand : candidates) {
    auto it = us.scores.find(cand.id);
    if (it == us.scores.end()) continue;
    if (!cand.spec) {
      it->second.output_nmse = 0.0;
      continue;
    }
    auto& s = scored.emplace_back(
        ScoredCandidate{&cand, &it->second, UnitRounder(layout, unit, cand, model, rounding), nullptr, {}});
    if (keeps_rounded(rounding, cand)) {
      const auto memo = rounding->rounded.find(memo_key(unit, cand));
      if (memo != rounding->rounded.end()) s.kept = &memo->second;
      else s.keep.emplace();
    }
  }
  double ref_sq = 0;
  for (std::size_t i = 0; i < unit.members.size(); ++i) {
    const auto& l = linear_of(model, unit.members[i].module);
    std::vector<float> ref(static_cast<std::size_t>(rows[i] * l.out));
    if (rows[i] > 0) l.forward(xs[i]->data(), rows[i], ref.data());
    for (float v : ref) ref_sq += static_cast<double>(v) * v;
    std::vector<float> w;  // the member's own weights, for a weight error
    for (auto& s : scored) {
      runtime::Matrix q = s.member(i, l);
      if (s.candidate->rounds_with_calibration()) {
        if (w.empty()) w = l.weight.to_f32();
        const std::vector<float> qf = q.to_f32();
        for (std::size_t k = 0; k < w.size(); ++k) {
          const double d = static_cast<double>(w[k]) - qf[k];
          s.weight_err += d * d;
          s.weight_ref += static_cast<double>(w[k]) * w[k];
        }
      }
      if (rows[i] == 0) continue;
      runtime::Linear ql = with_candidate(l, std::move(q), *s.candidate, cap.amax);
      std::vector<float> y(static_cast<std::size_t>(rows[i] * ql.out));
      ql.forward(xs[i]->data(), rows[i], y.data());
      for (std::size_t k = 0; k < y.size(); ++k) {
        const double d = static_cast<double>(y[k]) - ref[k];
        s.err += d * d;
      }
    }
  }
  for (auto& s : scored) {
    s.score->output_nmse = ref_sq > 0 ? s.err / ref_sq : 0.0;
    if (s.candidate->rounds_with_calibration())
      s.score->weight_nmse = s.weight_ref > 0 ? s.weight_err / s.weight_ref : 0.0;
    if (s.keep) rounding->rounded.emplace(memo_key(unit, *s.candidate), std::move(*s.keep));
  }
}

}  // namespace

InputAmax add_activation_aware(SensitivityTable& table, const UnitLayout& layout,
                               const std::vector<Candidate>& candidates, runtime::CausalLM& model,
                               const std::vector<std::int32_t>& tokens, const RuntimeTierOptions& options,
                               RoundingInputs* rounding) {
  Capture cap = capture_inputs(layout, model, tokens, options);
  std::uint64_t done = 0, total = 0;
  for (std::size_t ui = 0; ui < layout.units.size(); ++ui) total += !options.include || options.include(ui);
  for (std::size_t ui = 0; ui < layout.units.size(); ++ui) {
    if (options.include && !options.include(ui)) continue;
    const auto& unit = layout.units[ui];
    auto& us = table.units.at(ui);
    if (us.name != unit.name) throw_bad_input(fmt::format("sensitivity table and layout disagree at {}", unit.name));
    score_unit_outputs(layout, unit, candidates, model, cap, rounding, us);
    if (options.on_progress) options.on_progress("activation-aware", ++done, total);
  }
  if (table.tier == Tier::DataFree) table.tier = Tier::ActivationAware;
  return std::move(cap.amax);
}

namespace {

// KL and TV per unit of output error, measured on one unit.
struct Slope {
  double kl{0}, tv{0};
  bool known{false};
};

// Units measured when sampling every `every`-th layer: those layers, the last
// layer (the most sensitive on the models tried) and units outside layers.
std::vector<bool> measured_units(const UnitLayout& layout, int every) {
  int last = -1;
  for (const auto& u : layout.units) last = std::max(last, u.layer);
  std::vector<bool> out;
  for (const auto& u : layout.units) out.push_back(every <= 1 || u.layer < 0 || u.layer % every == 0 || u.layer == last);
  return out;
}

// The slope of an unmeasured unit: linear in depth between the nearest
// measured layers of the same kind, else the mean of every measured unit.
Slope interpolated_slope(const UnitLayout& layout, const std::vector<Slope>& slopes, std::size_t u) {
  const auto& unit = layout.units[u];
  const std::size_t none = slopes.size();
  std::size_t below = none, above = none;
  for (std::size_t v = 0; v < slopes.size(); ++v) {
    const auto& o = layout.units[v];
    if (!slopes[v].known || o.kind != unit.kind) continue;
    if (o.layer <= unit.layer && (below == none || o.layer > layout.units[below].layer)) below = v;
    if (o.layer >= unit.layer && (above == none || o.layer < layout.units[above].layer)) above = v;
  }
  if (below != none && above != none && below != above) {
    const double t = static_cast<double>(unit.layer - layout.units[below].layer) /
                     static_cast<double>(layout.units[above].layer - layout.units[below].layer);
    return {slopes[below].kl + t * (slopes[above].kl - slopes[below].kl),
            slopes[below].tv + t * (slopes[above].tv - slopes[below].tv), true};
  }
  if (below != none) return slopes[below];
  if (above != none) return slopes[above];
  Slope mean;
  int n = 0;
  for (const auto& s : slopes)
    if (s.known) {
      mean.kl += s.kl;
      mean.tv += s.tv;
      ++n;
    }
  if (n > 0) {
    mean.kl /= n;
    mean.tv /= n;
  }
  mean.known = true;
  return mean;
}

// The candidates measured on a unit: the named probes it has scores for, else
// its most lossy candidate by output error.
std::vector<const Candidate*> probes_of(const std::vector<Candidate>& candidates, const UnitSensitivity& us,
                                        const std::vector<std::string>& named, const std::string& unit) {
  std::vector<const Candidate*> probes;
  for (const auto& cand : candidates) {
    if (!cand.spec || !us.scores.count(cand.id)) continue;
    if (!us.scores.at(cand.id).output_nmse)
      throw_bad_input(fmt::format("measuring {} needs the activation-aware tier first", unit));
    if (std::find(named.begin(), named.end(), cand.id) != named.end()) probes.push_back(&cand);
  }
  if (probes.empty()) {
    const Candidate* worst = nullptr;
    for (const auto& cand : candidates)
      if (cand.spec && us.scores.count(cand.id) &&
          (!worst || *us.scores.at(cand.id).output_nmse > *us.scores.at(worst->id).output_nmse))
        worst = &cand;
    if (worst) probes.push_back(worst);
  }
  return probes;
}

// A measured unit's KL and TV per unit of output error: the mean over its
// measured candidates (in candidate order) with some output error.
Slope measured_slope(const std::vector<Candidate>& candidates, const UnitSensitivity& us) {
  Slope slope;
  int fits = 0;
  for (const auto& cand : candidates) {
    const auto it = us.scores.find(cand.id);
    if (it == us.scores.end() || !it->second.measured || !(*it->second.output_nmse > 0)) continue;
    slope.kl += *it->second.kl / *it->second.output_nmse;
    slope.tv += *it->second.tv / *it->second.output_nmse;
    ++fits;
  }
  if (fits > 0) {
    slope.kl /= fits;
    slope.tv /= fits;
    slope.known = true;
  }
  return slope;
}

}  // namespace

void measure_units(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                   runtime::CausalLM& model, const std::vector<std::int32_t>& tokens, const InputAmax& input_amax,
                   const RuntimeTierOptions& options, RoundingInputs* rounding) {
  const std::int64_t V = model.vocab();
  const auto base = calibration_logprobs(model, tokens, options.context);
  std::vector<bool> measure = measured_units(layout, options.probe_every);
  for (std::size_t ui = 0; ui < measure.size(); ++ui) measure[ui] = measure[ui] && (!options.include || options.include(ui));
  const auto to_measure = static_cast<std::uint64_t>(std::count(measure.begin(), measure.end(), true));
  std::uint64_t done = 0;
  for (std::size_t ui = 0; ui < layout.units.size(); ++ui) {
    if (!measure[ui]) continue;
    const auto& unit = layout.units[ui];
    auto& us = table.units.at(ui);
    for (const Candidate* cand : probes_of(candidates, us, options.probes, unit.name)) {
      auto saved = swap_in_candidate(layout, unit, *cand, model, input_amax, rounding);
      const auto q = calibration_logprobs(model, tokens, options.context);
      swap_back(unit, std::move(saved), model);
      const Divergence d = mean_divergence(base, q, V);
      auto& s = us.scores.at(cand->id);
      s.kl = d.kl;
      s.tv = d.tv;
      s.measured = true;
    }
    if (options.on_progress) options.on_progress("measured", ++done, to_measure);
  }
}

void fit_unmeasured(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                    int probe_every) {
  const auto measure = measured_units(layout, probe_every);
  std::vector<Slope> slopes(layout.units.size());
  for (std::size_t ui = 0; ui < layout.units.size(); ++ui)
    if (measure[ui]) slopes[ui] = measured_slope(candidates, table.units[ui]);
  // The candidates not measured (on measured units: the unit's own slope).
  for (std::size_t ui = 0; ui < layout.units.size(); ++ui) {
    const Slope slope = measure[ui] ? slopes[ui] : interpolated_slope(layout, slopes, ui);
    for (auto& [id, s] : table.units[ui].scores) {
      if (s.measured) continue;
      s.kl = slope.kl * s.output_nmse.value_or(0.0);
      s.tv = slope.tv * s.output_nmse.value_or(0.0);
    }
  }
  table.tier = Tier::Measured;
}

void add_measured(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                  runtime::CausalLM& model, const std::vector<std::int32_t>& tokens, const InputAmax& input_amax,
                  const RuntimeTierOptions& options, RoundingInputs* rounding) {
  measure_units(table, layout, candidates, model, tokens, input_amax, options, rounding);
  fit_unmeasured(table, layout, candidates, options.probe_every);
}

void add_runtime_tiers(SensitivityTable& table, const UnitLayout& layout, const std::vector<Candidate>& candidates,
                       const std::string& checkpoint_dir, const CalibrationText& text, Tier tier,
                       const RuntimeTierOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.context < 2)
    throw_bad_input(fmt::format("calibration context {} is too short: windows need at least 2 tokens", options.context));
  auto cal = calibration_tokens(checkpoint_dir, text, rounding_tokens_for(candidates));
  table.text_provenance = std::move(cal.provenance);
  auto model = runtime::load_model(checkpoint_dir);
  RoundingInputs rounding(*model, cal.rounding, options.context);
  const InputAmax amax = add_activation_aware(table, layout, candidates, *model, cal.tokens, options, &rounding);
  if (tier == Tier::Measured) {
    measure_units(table, layout, candidates, *model, cal.tokens, amax, options, &rounding);
    if (!options.include) fit_unmeasured(table, layout, candidates, options.probe_every);
  }
  table.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace selq::planner
