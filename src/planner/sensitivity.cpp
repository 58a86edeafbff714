#include "planner/sensitivity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "pipeline/module_names.h"

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
    const float static_scale = mode == quant::ActMode::NVFP4 ? 448.0f * 6.0f / amax : amax / 448.0f;
    quant::qdq_activation_row(mode, q.data(), q.size(), static_scale);
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
  std::ifstream in(path);
  if (!in) throw_io(fmt::format("{}: cannot open sensitivity table", path));
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw_bad_input(fmt::format("{}: not valid JSON", path));
  return SensitivityTable::from_json(j, path);
}

// ---- tier 1 ----

SensitivityTable data_free_sensitivity(const io::Checkpoint& ckpt, const UnitLayout& layout,
                                       const std::vector<Candidate>& candidates, const SensitivityOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  SensitivityTable table;
  table.source = ckpt.dir();
  table.tier = Tier::DataFree;
  for (const auto& c : candidates) table.candidates.push_back(c.id);

  std::uint64_t total = 0, done = 0;
  for (const auto& u : layout.units)
    for (const auto& m : u.members) total += m.weight.nbytes();

  std::vector<std::uint8_t> scratch;
  for (const auto& unit : layout.units) {
    UnitSensitivity us{unit.name, unit.kind, unit.layer, {}, {}};
    for (const auto& m : unit.members) us.members.push_back(m.module);
    std::map<std::string, quant::ErrorMetrics> metrics;  // weight format -> over the unit
    std::map<std::string, std::string> weight_key;       // candidate id -> its weight format
    std::vector<bool> applies(candidates.size(), true);
    for (std::size_t c = 0; c < candidates.size(); ++c)
      applies[c] = candidates[c].spec.has_value() && unit_cost(layout, unit, candidates[c]).has_value();

    // Fused groups share an NVFP4 global scale, so their members are read together.
    std::map<std::string, std::vector<const UnitMember*>> groups;
    for (const auto& m : unit.members) {
      std::string key = pipeline::nvfp4_fused_group(m.module);
      groups[key.empty() ? m.module : key].push_back(&m);
    }
    for (const auto& [key, members] : groups) {
      std::vector<io::FetchedTensor> fetched;
      for (const auto* m : members) fetched.push_back(ckpt.fetch(m->weight.name));
      std::optional<float> group_amax;
      // Candidates that differ only in activations store the same weights: score those once.
      std::vector<quant::SchemeSpec> scored;
      for (std::size_t c = 0; c < candidates.size(); ++c) {
        if (!applies[c]) continue;
        const quant::SchemeSpec spec = dialect_spec(layout, candidates[c]);
        quant::SchemeSpec weights_only = spec;
        weights_only.act = quant::ActMode::None;
        if (std::find(scored.begin(), scored.end(), weights_only) != scored.end()) continue;
        scored.push_back(weights_only);
        const std::string key = std::to_string(scored.size() - 1);  // index into `scored`
        weight_key[candidates[c].id] = key;
        quant::QuantizeOptions qopt;
        if (spec.kind == quant::SchemeKind::NVFP4) {
          if (!group_amax) {
            float a = 0;
            for (const auto& f : fetched) a = std::max(a, quant::tensor_amax(f.view));
            group_amax = a;
          }
          qopt.global_amax = group_amax;
        }
        for (std::size_t i = 0; i < members.size(); ++i) {
          const auto outs_spec = quant::scheme_outputs(weights_only, members[i]->weight.shape);
          std::uint64_t need = 0;
          for (const auto& o : outs_spec) need += dtype_nbytes(o.dtype, shape_numel(o.shape));
          if (scratch.size() < need) scratch.resize(need);
          std::vector<std::span<std::uint8_t>> outs;
          std::uint64_t off = 0;
          for (const auto& o : outs_spec) {
            const auto n = dtype_nbytes(o.dtype, shape_numel(o.shape));
            outs.emplace_back(scratch.data() + off, n);
            off += n;
          }
          quant::ErrorMetrics em;
          quant::quantize_weight(weights_only, fetched[i].view, outs, em, qopt);
          metrics[key].merge(em);
        }
        for (std::size_t d = c + 1; d < candidates.size(); ++d) {
          if (!applies[d]) continue;
          quant::SchemeSpec other = dialect_spec(layout, candidates[d]);
          other.act = quant::ActMode::None;
          if (other == weights_only) weight_key[candidates[d].id] = key;
        }
      }
      for (const auto* m : members) done += m->weight.nbytes();
      if (options.on_progress) options.on_progress(done, total);
    }
    for (std::size_t c = 0; c < candidates.size(); ++c) {
      const auto& cand = candidates[c];
      if (!cand.spec) {
        us.scores.emplace(cand.id, CandidateScore{});
        continue;
      }
      if (!applies[c]) continue;
      const auto& em = metrics.at(weight_key.at(cand.id));
      CandidateScore s;
      s.weight_nmse = em.sum_sq_ref > 0 ? em.sum_sq_err / em.sum_sq_ref : 0.0;
      us.scores.emplace(cand.id, s);
    }
    table.units.push_back(std::move(us));
  }
  table.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return table;
}

}  // namespace selq::planner
