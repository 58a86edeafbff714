#include "planner/sensitivity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "quant/scheme_traits.h"
#include "recipe/fused_modules.h"

namespace selq::planner {

std::string tier_name(Tier t) {
  switch (t) {
    case Tier::DataFree: return "data-free";
    case Tier::ActivationAware: return "activation-aware";
    case Tier::Measured: return "measured";
  }
  return "data-free";
}

std::optional<Tier> tier_from_name(const std::string& name) {
  if (name == "data-free") return Tier::DataFree;
  if (name == "activation-aware") return Tier::ActivationAware;
  if (name == "measured") return Tier::Measured;
  return std::nullopt;
}

Tier parse_tier(const std::string& name) {
  auto t = tier_from_name(name);
  if (!t) throw_bad_input(fmt::format("unknown tier '{}' (data-free, activation-aware, measured)", name));
  return *t;
}

std::optional<double> objective_score(const CandidateScore& s, const Candidate& candidate, Tier tier,
                                      bool acceptance) {
  if (!candidate.spec) return 0.0;
  switch (tier) {
    case Tier::Measured: return acceptance ? s.tv : s.kl;
    case Tier::ActivationAware: return s.output_nmse;
    case Tier::DataFree: return s.weight_nmse + activation_error_prior(candidate.spec->act);
  }
  return std::nullopt;
}

namespace {

double measure_activation_error(quant::ActMode mode) {
  // Laplace rows of 4096 channels with 1% outlier channels 20x larger, the
  // shape LLM activations have; mt19937's output is the same everywhere.
  static constexpr int kRows = 64, kCols = 4096;
  std::mt19937 rng(20261201u);
  std::vector<float> outlier(kCols, 1.0f);
  for (int c = 0; c < kCols; c += 100) outlier[static_cast<std::size_t>(c)] = 20.0f;
  double ref = 0, err = 0;
  std::vector<float> row(kCols), q(kCols);
  for (int r = 0; r < kRows; ++r) {
    for (int c = 0; c < kCols; ++c) {
      const double u = (static_cast<double>(rng()) + 0.5) / 4294967296.0 - 0.5;
      const double lap = (u < 0 ? 1.0 : -1.0) * std::log(1.0 - 2.0 * std::fabs(u));
      row[static_cast<std::size_t>(c)] = static_cast<float>(lap) * outlier[static_cast<std::size_t>(c)];
    }
    q = row;
    // Static modes need a calibrated scale: use this row set's own amax.
    float amax = 0;
    for (float v : row) amax = std::max(amax, std::fabs(v));
    quant::qdq_activation_row(mode, q.data(), q.size(), quant::static_scale_for_amax(mode, amax));
    for (int c = 0; c < kCols; ++c) {
      const double d = static_cast<double>(row[static_cast<std::size_t>(c)]) - q[static_cast<std::size_t>(c)];
      ref += static_cast<double>(row[static_cast<std::size_t>(c)]) * row[static_cast<std::size_t>(c)];
      err += d * d;
    }
  }
  return err / ref;
}

}  // namespace

double activation_error_prior(quant::ActMode mode) {
  if (mode == quant::ActMode::None) return 0.0;
  static std::mutex mu;
  static std::map<quant::ActMode, double> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(mode);
  if (it == cache.end()) it = cache.emplace(mode, measure_activation_error(mode)).first;
  return it->second;
}

// ---- JSON ----

nlohmann::json SensitivityTable::to_json() const {
  nlohmann::json units_json = nlohmann::json::array();
  for (const auto& u : units) {
    nlohmann::json scores = nlohmann::json::object();
    for (const auto& [id, s] : u.scores) {
      nlohmann::json e = {{"weight_nmse", s.weight_nmse}};
      if (s.output_nmse) e["output_nmse"] = *s.output_nmse;
      if (s.kl) e["kl"] = *s.kl;
      if (s.tv) e["tv"] = *s.tv;
      if (s.kl) e["measured"] = s.measured;
      scores[id] = std::move(e);
    }
    units_json.push_back({{"name", u.name}, {"kind", u.kind}, {"layer", u.layer}, {"members", u.members},
                          {"scores", std::move(scores)}});
  }
  // The data-free tier's activation term, for readers that rebuild its scores.
  nlohmann::json prior = nlohmann::json::object();
  for (const auto& id : candidates)
    if (const Candidate* c = find_candidate(id); c && c->spec) prior[id] = activation_error_prior(c->spec->act);
  return {{"format", "selq-sensitivity-v1"}, {"source", source},       {"tier", tier_name(tier)},
          {"activation_prior", std::move(prior)},
          {"candidates", candidates},        {"seconds", seconds},     {"text_provenance", text_provenance},
          {"units", std::move(units_json)}};
}

SensitivityTable SensitivityTable::from_json(const nlohmann::json& j, const std::string& path) {
  auto fail = [&](const std::string& what) -> void { throw_bad_input(fmt::format("{}: {}", path, what)); };
  if (!j.is_object() || j.value("format", "") != "selq-sensitivity-v1")
    fail("not a selq sensitivity table (expected \"format\": \"selq-sensitivity-v1\"; made by `selq sensitivity`)");
  SensitivityTable t;
  try {
    t.source = j.at("source").get<std::string>();
    auto tier = tier_from_name(j.at("tier").get<std::string>());
    if (!tier) fail(fmt::format("unknown tier '{}'", j.at("tier").get<std::string>()));
    t.tier = *tier;
    t.candidates = j.at("candidates").get<std::vector<std::string>>();
    t.seconds = j.value("seconds", 0.0);
    t.text_provenance = j.value("text_provenance", nlohmann::json());
    for (const auto& uj : j.at("units")) {
      UnitSensitivity u;
      u.name = uj.at("name").get<std::string>();
      u.kind = uj.at("kind").get<std::string>();
      u.layer = uj.at("layer").get<int>();
      u.members = uj.at("members").get<std::vector<std::string>>();
      for (const auto& [id, sj] : uj.at("scores").items()) {
        if (!find_candidate(id)) fail(fmt::format("unit {}: unknown candidate '{}'", u.name, id));
        CandidateScore s;
        s.weight_nmse = sj.at("weight_nmse").get<double>();
        if (sj.contains("output_nmse")) s.output_nmse = sj["output_nmse"].get<double>();
        if (sj.contains("kl")) s.kl = sj["kl"].get<double>();
        if (sj.contains("tv")) s.tv = sj["tv"].get<double>();
        s.measured = sj.value("measured", false);
        u.scores.emplace(id, s);
      }
      t.units.push_back(std::move(u));
    }
  } catch (const nlohmann::json::exception& e) {
    fail(fmt::format("malformed sensitivity table: {}", e.what()));
  }
  return t;
}

const UnitSensitivity* SensitivityTable::find(const std::string& unit) const {
  for (const auto& u : units)
    if (u.name == unit) return &u;
  return nullptr;
}

SensitivityTable load_sensitivity(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(path), nullptr, false);
  if (j.is_discarded()) throw_bad_input(fmt::format("{}: not valid JSON", path));
  return SensitivityTable::from_json(j, path);
}

// ---- tier 1 ----

namespace {

// The distinct weight formats of the candidates that apply to a unit:
// candidates that differ only in activations store the same weights, so they
// are scored once. format_of[c] indexes `formats` (nullopt: does not apply).
struct UnitFormats {
  std::vector<quant::SchemeSpec> formats;
  std::vector<std::optional<std::size_t>> format_of;
};

UnitFormats unit_formats(const UnitLayout& layout, const DecisionUnit& unit, const std::vector<Candidate>& candidates) {
  UnitFormats u;
  u.format_of.resize(candidates.size());
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (!candidates[c].spec || candidates[c].rounds_with_calibration() || !unit_cost(layout, unit, candidates[c]))
      continue;
    quant::SchemeSpec weights = dialect_spec(layout, candidates[c]);
    weights.act = quant::ActMode::None;
    // The same stored format with another rounding is other weights (== compares formats only).
    auto it = std::find_if(u.formats.begin(), u.formats.end(), [&](const quant::SchemeSpec& f) {
      return f == weights && f.rounding.value == weights.rounding.value;
    });
    u.format_of[c] = static_cast<std::size_t>(it - u.formats.begin());
    if (it == u.formats.end()) u.formats.push_back(weights);
  }
  return u;
}

// Fused groups share an NVFP4 global scale, so their members are read
// together; in key order (the order the scores' sums were defined in).
std::vector<std::vector<const UnitMember*>> fused_groups(const DecisionUnit& unit) {
  std::map<std::string, std::vector<const UnitMember*>> groups;
  for (const auto& m : unit.members) {
    std::string key = recipe::fused_shard_key(m.module);
    groups[key.empty() ? m.module : key].push_back(&m);
  }
  std::vector<std::vector<const UnitMember*>> out;
  for (auto& [key, members] : groups) out.push_back(std::move(members));
  return out;
}

// Tensors this large are read ahead and unmapped one by one; for smaller ones
// the two madvise calls cost more than they save on 70,000-tensor skeletons,
// and their pages are the kernel's to read ahead and reclaim.
constexpr std::uint64_t kPagedBytes = 1 << 20;

// Adds every format's error on the group's members to metrics[f]: all formats
// from one read of each member (quant::measure_weight); per format the members
// merge in member order, as quantizing them one by one did.
void score_group(const io::Checkpoint& ckpt, const std::vector<const UnitMember*>& members,
                 const std::vector<quant::SchemeSpec>& formats, std::vector<quant::ErrorMetrics>& metrics) {
  std::vector<io::FetchedTensor> fetched;
  for (const auto* m : members) fetched.push_back(ckpt.fetch(m->weight.name));
  std::optional<float> group_amax;
  std::vector<quant::TensorQuantizeOptions> qopts(formats.size());
  for (std::size_t f = 0; f < formats.size(); ++f) {
    if (!quant::scheme_traits(formats[f].kind).fused_group_amax) continue;
    if (!group_amax) {
      float a = 0;
      for (const auto& t : fetched) a = std::max(a, quant::tensor_amax(t.view));
      group_amax = a;
    }
    qopts[f].global_amax = group_amax;
  }
  std::vector<quant::ErrorMetrics> em(formats.size());
  for (const auto& t : fetched) {
    quant::measure_weight(formats, t.view, qopts, em);
    for (std::size_t f = 0; f < formats.size(); ++f) metrics[f].merge(em[f]);
  }
  // Local tensors are views of the mapped files: unmapped as consumed, the
  // resident set stays that of the group in hand.
  if (!ckpt.is_remote())
    for (const auto& t : fetched)
      if (t.view.bytes.size() >= kPagedBytes) io::release_file_pages(t.view.bytes);
}

// Asks the kernel to read a group's weights ahead (local files only), so that
// a disk read overlaps the scoring of the group before it.
void prefetch_group(const io::Checkpoint& ckpt, const std::vector<const UnitMember*>& members) {
  if (ckpt.is_remote()) return;
  for (const auto* m : members)
    if (m->weight.nbytes() >= kPagedBytes) io::prefetch_file_pages(ckpt.view(m->weight.name).bytes);
}

UnitSensitivity unit_scores(const DecisionUnit& unit, const std::vector<Candidate>& candidates,
                            const UnitFormats& formats, const std::vector<quant::ErrorMetrics>& metrics) {
  UnitSensitivity us{unit.name, unit.kind, unit.layer, {}, {}};
  for (const auto& m : unit.members) us.members.push_back(m.module);
  for (std::size_t c = 0; c < candidates.size(); ++c) {
    if (!candidates[c].spec) {
      us.scores.emplace(candidates[c].id, CandidateScore{});
    } else if (formats.format_of[c]) {
      const auto& em = metrics[*formats.format_of[c]];
      CandidateScore s;
      s.weight_nmse = em.sum_sq_ref > 0 ? em.sum_sq_err / em.sum_sq_ref : 0.0;
      us.scores.emplace(candidates[c].id, s);
    }
  }
  return us;
}

}  // namespace

void check_tier_scores(const std::vector<Candidate>& candidates, Tier tier) {
  if (tier != Tier::DataFree) return;
  for (const auto& c : candidates)
    if (c.rounds_with_calibration())
      throw_bad_input(fmt::format("candidate '{}' rounds with calibration rows, which the data-free tier does not "
                                  "run: score it with the activation-aware or measured tier",
                                  c.id));
}

SensitivityTable data_free_sensitivity(const io::Checkpoint& ckpt, const UnitLayout& layout,
                                       const std::vector<Candidate>& candidates, const SensitivityOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  SensitivityTable table;
  table.source = ckpt.dir();
  table.tier = Tier::DataFree;
  for (const auto& c : candidates) table.candidates.push_back(c.id);

  // Every included unit's groups in reading order, so that the next one can
  // be read ahead while one is scored.
  struct Work {
    std::size_t unit;
    std::vector<const UnitMember*> members;
  };
  std::vector<Work> work;
  std::uint64_t total = 0, done = 0;
  for (std::size_t k = 0; k < layout.units.size(); ++k) {
    if (options.include && !options.include(k)) continue;
    for (auto& g : fused_groups(layout.units[k])) work.push_back({k, std::move(g)});
    for (const auto& m : layout.units[k].members) total += m.weight.nbytes();
  }

  for (std::size_t w = 0; w < work.size();) {
    const std::size_t k = work[w].unit;
    const auto& unit = layout.units[k];
    const UnitFormats formats = unit_formats(layout, unit, candidates);
    std::vector<quant::ErrorMetrics> metrics(formats.formats.size());
    for (; w < work.size() && work[w].unit == k; ++w) {
      if (w + 1 < work.size()) prefetch_group(ckpt, work[w + 1].members);
      score_group(ckpt, work[w].members, formats.formats, metrics);
      for (const auto* m : work[w].members) done += m->weight.nbytes();
      if (options.on_progress) options.on_progress(done, total);
    }
    table.units.push_back(unit_scores(unit, candidates, formats, metrics));
  }
  table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return table;
}

}  // namespace selq::planner
