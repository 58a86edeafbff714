#include "planner/candidates.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "quant/act_modes.h"
#include "quant/rounding_traits.h"

namespace selq::planner {
namespace {

using enum Hardware;
using quant::ActMode;
using quant::SchemeKind;

std::vector<Candidate> make_candidates() {
  // Hardware per docs/ENGINE_RULES.md §10: Blackwell runs NVFP4/MXFP4/MXFP8/FP8; Hopper FP8 and
  // INT4/INT8 weight-only (Marlin); MI355 MXFP4/MXFP8/FP8.
  return {
      {"bf16", std::nullopt, "keep the source weights (BF16/F16/F32)", {Blackwell, Hopper, Mi355}},
      {"fp8-w8a8", quant::SchemeSpec{.kind = SchemeKind::FP8Channel, .act = ActMode::FP8PerToken},
       "FP8 E4M3 per output channel, activations FP8 per token (dynamic)", {Blackwell, Hopper, Mi355}},
      {"fp8-w8a16", quant::SchemeSpec{.kind = SchemeKind::FP8Channel},
       "FP8 E4M3 per output channel, weight-only", {Blackwell, Hopper, Mi355}},
      {"mxfp8-w8a8", quant::SchemeSpec{.kind = SchemeKind::MXFP8, .act = ActMode::MXFP8Dynamic},
       "MXFP8, activations MXFP8 (dynamic)", {Blackwell, Mi355}},
      {"int8-w8a16", quant::SchemeSpec{.kind = SchemeKind::IntChannel, .bits = 8},
       "INT8 per output channel, weight-only", {Hopper}},
      {"nvfp4-w4a16", quant::SchemeSpec{.kind = SchemeKind::NVFP4},
       "NVFP4 (E2M1, E4M3 scale per 16, global scale), weight-only", {Blackwell}},
      {"nvfp4-w4a4", quant::SchemeSpec{.kind = SchemeKind::NVFP4, .act = ActMode::NVFP4},
       "NVFP4, activations NVFP4 with a calibrated global scale (static)", {Blackwell}},
      {"mxfp4-w4a16", quant::SchemeSpec{.kind = SchemeKind::MXFP4},
       "MXFP4 (E2M1, E8M0 scale per 32), weight-only", {Blackwell, Mi355}},
      {"mxfp4-w4a4", quant::SchemeSpec{.kind = SchemeKind::MXFP4, .act = ActMode::MXFP4Dynamic},
       "MXFP4, activations MXFP4 (dynamic)", {Blackwell, Mi355}},
      {"int4-w4a16", quant::SchemeSpec{.kind = SchemeKind::IntGroup, .bits = 4, .group_size = 128},
       "INT4 per group of 128 inputs, weight-only", {Hopper}},
  };
}

}  // namespace

Hardware parse_hardware(const std::string& name) {
  for (Hardware h : {Any, Blackwell, Hopper, Mi355})
    if (hardware_name(h) == name) return h;
  throw_bad_input(fmt::format("unknown hardware '{}' (blackwell, hopper, mi355, any)", name));
}

std::string hardware_name(Hardware h) {
  switch (h) {
    case Any: return "any";
    case Blackwell: return "blackwell";
    case Hopper: return "hopper";
    case Mi355: return "mi355";
  }
  return "any";
}

bool Candidate::calibrated() const { return spec && quant::act_mode_traits(spec->act).is_static(); }

bool Candidate::rounds_with_calibration() const {
  return spec && quant::rounding_input(spec->rounding.value) != quant::RoundingInput::None;
}

const std::vector<Candidate>& all_candidates() {
  static const std::vector<Candidate> candidates = make_candidates();
  return candidates;
}

const Candidate* find_candidate(const std::string& id) {
  for (const auto& c : all_candidates())
    if (c.id == id) return &c;
  const auto plus = id.rfind('+');
  if (plus == std::string::npos) return nullptr;
  const Candidate* base = find_candidate(id.substr(0, plus));
  if (!base || !base->spec) return nullptr;
  const quant::Rounding r = quant::parse_rounding(id.substr(plus + 1), "candidate rounding");
  if (!quant::rounding_takes(r, base->spec->kind))
    throw_bad_input(fmt::format("candidate '{}': rounding '{}' rounds {}, not {}", id, quant::rounding_name(r),
                                quant::rounding_traits(r).takes_text, base->id));
  if (r == quant::Rounding::Nearest) return base;
  // Derived candidates live as long as the process, one per id (pointers are handed out).
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Candidate>> derived;
  const std::lock_guard lock(mu);
  auto& slot = derived[id];
  if (!slot) {
    slot = std::make_unique<Candidate>(*base);
    slot->id = id;
    slot->spec->rounding.value = r;
    slot->description = fmt::format("{}, rounding {}", base->description, quant::rounding_name(r));
  }
  return slot.get();
}

std::vector<Candidate> select_candidates(const std::vector<std::string>& ids, Hardware hw,
                                         exporter::Dialect dialect) {
  std::vector<std::string> wanted = ids;
  if (wanted.empty() || wanted == std::vector<std::string>{"all"}) {
    wanted.clear();
    for (const auto& c : all_candidates()) wanted.push_back(c.id);
  }
  std::vector<std::string> known;
  for (const auto& c : all_candidates()) known.push_back(c.id);
  known.push_back("any of them +mse, +weighted or +gptq");
  std::vector<Candidate> out{*find_candidate("bf16")};
  for (const auto& id : wanted) {
    const Candidate* c = find_candidate(id);
    if (!c)
      throw_bad_input(fmt::format("unknown candidate format '{}' (known: {})", id, fmt::join(known, ", ")));
    if (c->id == "bf16") continue;
    if (hw != Any && std::find(c->runs_on.begin(), c->runs_on.end(), hw) == c->runs_on.end()) continue;
    try {
      exporter::check_dialect_supports(dialect, exporter::adapt_scheme_for_dialect(dialect, *c->spec, DType::BF16));
    } catch (const Error&) {
      continue;  // the dialect cannot write it: not a candidate for this plan
    }
    if (std::none_of(out.begin(), out.end(), [&](const Candidate& o) { return o.id == c->id; })) out.push_back(*c);
  }
  return out;
}

}  // namespace selq::planner
