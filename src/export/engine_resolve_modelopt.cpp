// How vLLM finds a module's ModelOpt scheme (docs/ENGINE_RULES.md §3), from config.json's
// quantization_config or hf_quant_config.json's `quantization`: the exclude
// list (exact, fused shards all-or-none, substrings, globs, vision towers),
// then `quant_algo`, or for MIXED_PRECISION the module's entry in
// `quantized_layers` under its several spellings. Keep the steps literal,
// quirks included: catching them is the point.
#include <cctype>

#include <fmt/format.h>

#include "export/engine_resolve_internal.h"

namespace selq::exporter::detail {
namespace {

using nlohmann::json;
using Kind = EngineModule::Kind;

// {quant_algo[, group_size]}, as scheme_config_json writes it for modelopt.
json normalize_entry(const std::string& algo_in, const json& entry, const json& q) {
  std::string algo;
  for (char c : algo_in) algo += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  json out = {{"quant_algo", algo}};
  if (algo == "NVFP4" || algo == "W4A16_NVFP4" || algo == "MXFP8") {
    json gs = entry.value("group_size", q.value("group_size", json()));
    out["group_size"] = gs.is_null() ? json(algo == "MXFP8" ? 32 : 16) : gs;
  }
  return out;
}

// The first key of `ql` (in iteration order, which is key order) starting
// with `prefix`.
const json* first_key_under(const json& ql, const std::string& prefix) {
  if (ql.is_object()) {
    const auto& obj = ql.get_ref<const json::object_t&>();
    auto it = obj.lower_bound(prefix);
    return it != obj.end() && (it->first).starts_with(prefix) ? &it->second : nullptr;
  }
  for (const auto& [k, e] : ql.items()) {
    if (k.starts_with(prefix)) return &e;
  }
  return nullptr;
}

struct ModelOptIgnore {
  NameSet exact;
  std::vector<std::string> with_experts;  // entries containing "experts"
  NeedleSet needles;                      // entries as substrings of the name
  std::vector<std::string> globs;         // entries with '*'
};

class ModelOptRules final : public EngineRules {
 public:
  using EngineRules::EngineRules;

  std::optional<json> resolve(const EngineModule& em) override {
    const json& q = qc_.contains("quantization") ? qc_["quantization"] : qc_;
    if (excluded(em, ignore(q))) return std::nullopt;
    std::string algo = q.value("quant_algo", "");
    std::string up;
    for (char c : algo) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (up != "MIXED_PRECISION") {
      if (up.empty()) return std::nullopt;
      return normalize_entry(up, json::object(), q);
    }
    return mixed_precision(em, q);
  }

 private:
  std::optional<ModelOptIgnore> ignore_idx_;

  const ModelOptIgnore& ignore(const json& q) {
    if (ignore_idx_) return *ignore_idx_;
    ModelOptIgnore ix;
    for (auto& e : string_list(q.contains("exclude_modules") ? q["exclude_modules"]
                                                              : q.value("ignore", json::array()))) {
      if (contains(e, "experts")) ix.with_experts.push_back(e);
      if (e.find('*') != std::string::npos) ix.globs.push_back(e);
      ix.needles.add(e);
      ix.exact.insert(std::move(e));
    }
    return ignore_idx_.emplace(std::move(ix));
  }

  bool excluded(const EngineModule& em, const ModelOptIgnore& ign) const {
    const std::string& m = em.name;
    // 1. exact, fused shards all-or-none, experts substring-of-entry
    bool excluded = ign.exact.count(m) != 0;
    if (!excluded && em.kind == Kind::Fused) {
      std::size_t n = 0;
      for (const auto& s : em.members) n += ign.exact.count(s) ? 1 : 0;
      if (n != 0 && n != em.members.size()) fail(fmt::format("shards of {} are partly excluded", m));
      excluded = n == em.members.size();
    }
    if (!excluded && contains(m, "experts")) {
      for (const auto& e : ign.with_experts) {
        if (contains(e, m)) excluded = true;
      }
    }
    // 2. substring, also without a leading language_model.
    std::string stripped = m.starts_with("language_model.") ? m.substr(15) : m;
    if (ign.needles.any_in(m) || ign.needles.any_in(stripped)) excluded = true;
    for (const auto& e : ign.globs) {
      if (py_fnmatch(m, e)) excluded = true;  // 3.
    }
    for (const char* v : {"vision_tower", "vision_model", "vit_large_projector"}) {  // 4.
      if (contains(m, v)) excluded = true;
    }
    return excluded;
  }

  std::optional<json> mixed_precision(const EngineModule& em, const json& q) const {
    const std::string& m = em.name;
    static const json kNoLayers = json::object();
    const json& ql = q.contains("quantized_layers") ? q["quantized_layers"] : kNoLayers;
    if (ql.empty()) fail("MIXED_PRECISION needs a non-empty quantized_layers");
    auto entry_algo = [&](const json& e) { return e.value("quant_algo", ""); };
    // 1. direct key (with the lm_head and language_model spellings)
    std::vector<std::string> candidates = {m};
    if (last_component(m) == "lm_head") candidates.push_back("lm_head");
    for (const auto& [a, b] : {std::pair<std::string, std::string>{"language_model.model.", "model.language_model."},
                               {"model.language_model.", "language_model.model."}}) {
      if (m.starts_with(a)) candidates.push_back(b + m.substr(a.size()));
    }
    for (const auto& c : candidates) {
      if (ql.contains(c)) return normalize_entry(entry_algo(ql[c]), ql[c], q);
    }
    // 2./5. fused shards
    if (em.kind == Kind::Fused) {
      std::optional<json> found;
      for (const auto& s : em.members) {
        if (!ql.contains(s)) continue;
        json e = normalize_entry(entry_algo(ql[s]), ql[s], q);
        if (found && *found != e) fail(fmt::format("shards of {} have different quant_algo", m));
        found = e;
      }
      if (found) return found;
    }
    // 3. first key under the prefix
    if (const json* e = first_key_under(ql, m + ".")) return normalize_entry(entry_algo(*e), *e, q);
    // 4. experts: any key under the parent
    if (em.kind == Kind::Experts) {
      if (const json* e = first_key_under(ql, parent_of(m) + "."))
        return normalize_entry(entry_algo(*e), *e, q);
    }
    return std::nullopt;
  }
};

}  // namespace

std::unique_ptr<EngineRules> modelopt_rules(Engine e, const json& qc) {
  return std::make_unique<ModelOptRules>(e, qc);
}

}  // namespace selq::exporter::detail
