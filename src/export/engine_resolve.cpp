// Engine lookup mimics. Each function follows the numbered steps of
// ENGINES.md for its engine; keep them literal, including the engines'
// quirks (substring matching, expert-0 probing), because catching those
// quirks is the point.
#include "export/engine_resolve.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "export/module_names.h"

namespace selq::exporter {

using nlohmann::json;
using Kind = EngineModule::Kind;

std::string engine_name(Engine e) {
  switch (e) {
    case Engine::VllmCompressedTensors: return "vllm-compressed-tensors";
    case Engine::SglangCompressedTensors: return "sglang-compressed-tensors";
    case Engine::VllmQuark: return "vllm-quark";
    case Engine::SglangQuark: return "sglang-quark";
    case Engine::AtomQuark: return "atom-quark";
    case Engine::VllmModelOpt: return "vllm-modelopt";
  }
  return "?";
}

std::vector<Engine> engines_for(Dialect d) {
  switch (d) {
    case Dialect::CompressedTensors: return {Engine::VllmCompressedTensors, Engine::SglangCompressedTensors};
    case Dialect::Quark: return {Engine::VllmQuark, Engine::SglangQuark, Engine::AtomQuark};
    case Dialect::ModelOpt: return {Engine::VllmModelOpt};
  }
  return {};
}

namespace {

EngineFamily family_of(Engine e) {
  switch (e) {
    case Engine::SglangCompressedTensors:
    case Engine::SglangQuark: return EngineFamily::Sglang;
    case Engine::AtomQuark: return EngineFamily::Atom;
    default: return EngineFamily::Vllm;
  }
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::string& hay, const std::string& needle) {
  return !needle.empty() && hay.find(needle) != std::string::npos;
}

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

std::vector<std::string> string_list(const json& j) {
  std::vector<std::string> out;
  if (j.is_array()) {
    for (const auto& e : j) {
      if (e.is_string()) out.push_back(e.get<std::string>());
    }
  }
  return out;
}

// `re:` or exact, as vLLM/SGLang use for CT targets and ignore, Quark exclude.
bool exact_or_re_match(const std::string& name, const std::string& pattern) {
  if (starts_with(pattern, "re:")) return py_re_match(pattern.substr(3), name);
  return pattern == name;
}

std::string class_name_of(const EngineModule& em) {
  std::string last = last_component(em.name);
  if (last == "lm_head" || last == "head") return "ParallelLMHead";
  if (em.kind == Kind::Experts) return "RoutedExperts";
  if (last == "qkv_proj") return "QKVParallelLinear";
  if (last == "fused_qkv_a_proj" || last == "fused_qkv_a_proj_with_mqa") return "DeepSeekV2FusedQkvAProjLinear";
  if (last == "gate_up_proj") return "MergedColumnParallelLinear";
  if (last == "o_proj" || last == "down_proj") return "RowParallelLinear";
  return "ColumnParallelLinear";
}

std::string expert_index(const std::string& member) {
  std::string p = parent_of(member);
  return last_component(p);
}

}  // namespace

struct EngineResolver::Impl {
  Engine engine;
  json qc;
  std::vector<std::string> all;
  std::vector<EngineModule> ems;
  std::map<std::string, std::size_t> index;  // checkpoint member or engine name -> ems index
  std::map<std::string, std::optional<json>> cache;

  Impl(Engine e, json q, std::vector<std::string> a) : engine(e), qc(std::move(q)), all(std::move(a)) {
    ems = engine_modules(family_of(e), all);
    for (std::size_t i = 0; i < ems.size(); ++i) {
      index[ems[i].name] = i;
      for (const auto& m : ems[i].members) index[m] = i;
    }
  }

  // Unknown names are looked up as plain linears; kept so references stay valid.
  mutable std::map<std::string, EngineModule> loose;

  const EngineModule& module_for(const std::string& m) const {
    auto it = index.find(m);
    if (it != index.end()) return ems[it->second];
    auto [pos, _] = loose.try_emplace(m, EngineModule{m, Kind::Linear, {m}});
    return pos->second;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw_bad_input(fmt::format("{} would raise: {}", engine_name(engine), what));
  }

  // ---------------- compressed-tensors (ENGINES.md §1.2) ----------------
  std::optional<json> ct_linear(const std::string& prefix, Kind kind, const std::vector<std::string>& shards,
                                const std::string& cls) {
    bool sglang = engine == Engine::SglangCompressedTensors;
    auto ignored_by = [&](const std::string& name) {
      for (const auto& pat : string_list(qc.value("ignore", json::array()))) {
        if (exact_or_re_match(name, pat)) return true;
        if (sglang && !starts_with(pat, "re:") && contains(lower(name), lower(pat))) return true;
      }
      return false;
    };
    // 1. should_ignore_layer
    bool ignored = ignored_by(prefix);
    if (!ignored && kind == Kind::Fused) {
      std::size_t n = 0;
      for (const auto& s : shards) n += ignored_by(s) ? 1 : 0;
      if (n != 0 && n != shards.size())
        fail(fmt::format("shards of {} are partly ignored; vLLM requires all to use the same scheme", prefix));
      ignored = n == shards.size();
    }
    if (ignored) return std::nullopt;

    // 2. target_scheme_map in group order; a later group takes over a target.
    std::vector<std::pair<std::string, json>> targets;
    std::string top_format = qc.value("format", "");
    const json groups = qc.value("config_groups", json::object());
    for (const auto& [gname, g] : groups.items()) {
      auto ts = string_list(g.value("targets", json::array()));
      if (ts.size() == 1 && ts[0].size() >= 9 && ts[0].compare(ts[0].size() - 9, 9, "Attention") == 0) continue;
      json scheme = {{"weights", g.value("weights", json())},
                     {"input_activations", g.value("input_activations", json())},
                     {"output_activations", g.value("output_activations", json())},
                     {"format", g.contains("format") && !g["format"].is_null() ? g["format"] : json(top_format)}};
      for (const auto& t : ts) {
        auto it = std::find_if(targets.begin(), targets.end(), [&](const auto& p) { return p.first == t; });
        if (it == targets.end()) targets.emplace_back(t, scheme);
        else it->second = scheme;
      }
    }
    for (const auto& [t, s] : targets) {
      if (exact_or_re_match(prefix, t)) return s;
    }
    if (kind == Kind::Fused) {
      std::optional<json> first;
      bool all_matched = true;
      for (const auto& shard : shards) {
        auto it = std::find_if(targets.begin(), targets.end(),
                               [&](const auto& p) { return exact_or_re_match(shard, p.first); });
        if (it == targets.end()) { all_matched = false; break; }
        if (!first) first = it->second;
      }
      if (all_matched && first) return first;
    }
    std::string lc = lower(cls);
    for (const auto& [t, s] : targets) {
      if (starts_with(t, "re:")) continue;
      if (contains(lc, lower(t)) || (cls == "RoutedExperts" && t == "Linear")) return s;
    }
    if (sglang) fail(fmt::format("Unable to find matching target for {} in the compressed-tensors config", prefix));
    return std::nullopt;
  }

  std::optional<json> ct(const EngineModule& em) {
    if (em.kind != Kind::Experts) return ct_linear(em.name, em.kind, em.members, class_name_of(em));
    // §1.2 MoE: only expert 0's projections are probed, and they must agree.
    std::vector<std::string> probes;
    for (const auto& m : em.members) {
      if (expert_index(m) == "0") probes.push_back(m);
    }
    if (probes.empty()) fail(fmt::format("{} has no expert 0 to probe", em.name));
    std::optional<json> first;
    for (std::size_t i = 0; i < probes.size(); ++i) {
      auto r = ct_linear(probes[i], Kind::Linear, {probes[i]}, "RoutedExperts");
      if (i == 0) first = r;
      else if (r != first) fail(fmt::format("{} projections of expert 0 resolve to different schemes", em.name));
    }
    return first;
  }

  // ---------------- Quark (ENGINES.md §2.2, §4) ----------------
  static std::string atom_rewrite(std::string s) {
    for (const auto& rule : packed_modules(EngineFamily::Atom)) {
      for (const auto& shard : rule.shards) {
        for (const char* tail : {"", "*"}) {
          std::string pat = "." + shard + tail;
          if (s.size() >= pat.size() && s.compare(s.size() - pat.size(), pat.size(), pat) == 0) {
            return s.substr(0, s.size() - pat.size()) + "." + rule.fused + tail;
          }
        }
      }
    }
    return s;
  }

  bool quark_excluded_name(const std::string& name, const std::vector<std::string>& excl) const {
    for (const auto& e : excl) {
      if (engine == Engine::AtomQuark) {
        if (starts_with(e, "re:")) {
          if (py_re_search(e.substr(3), name)) return true;
        } else if (e.find_first_of("*?[") != std::string::npos) {
          if (py_fnmatch(name, e)) return true;
        } else if (name == e || starts_with(name, e + ".")) {
          return true;
        }
      } else if (exact_or_re_match(name, e)) {
        return true;
      }
    }
    return false;
  }

  std::optional<json> quark(const EngineModule& em) {
    bool atom = engine == Engine::AtomQuark;
    bool sglang = engine == Engine::SglangQuark;
    std::vector<std::string> excl = string_list(qc.value("exclude", json::array()));
    if (atom) {
      for (auto& e : excl) e = atom_rewrite(e);
    }
    // 1. exclude
    bool excluded = quark_excluded_name(em.name, excl);
    if (!excluded && em.kind == Kind::Fused && !atom) {
      std::size_t n = 0;
      for (const auto& s : em.members) n += quark_excluded_name(s, excl) ? 1 : 0;
      if (n != 0 && n != em.members.size())
        fail(fmt::format("shards of {} are partly excluded", em.name));
      excluded = n == em.members.size();
    }
    if (!excluded && em.kind == Kind::Experts) {
      for (const auto& e : excl) {
        if (!starts_with(e, "re:") && (e == em.name || starts_with(e, em.name + "."))) excluded = true;
      }
    }
    if (excluded) return std::nullopt;

    // 2. layer_quant_config (3. layer_type_quant_config is dead for string keys), global.
    const json lqc = qc.value("layer_quant_config", json::object());
    auto lookup = [&](const std::string& name) -> json {
      for (const auto& [key0, cfg] : lqc.items()) {
        std::string key = atom ? atom_rewrite(key0) : key0;
        bool hit = sglang || key.find('*') != std::string::npos ? py_fnmatch(name, key) : contains(key, name);
        if (hit) return cfg;
      }
      return qc.value("global_quant_config", json());
    };
    std::vector<std::string> names =
        (em.kind == Kind::Fused && !atom) ? em.members : std::vector<std::string>{em.name};
    json first = lookup(names[0]);
    for (std::size_t i = 1; i < names.size(); ++i) {
      if (lookup(names[i]) != first)
        fail(fmt::format("shards of {} resolve to different layer configs", em.name));
    }
    if (first.is_null() || first.value("weight", json()).is_null()) return std::nullopt;
    return first;
  }

  // ---------------- ModelOpt (ENGINES.md §3) ----------------
  static json normalize_modelopt_entry(const std::string& algo_in, const json& entry, const json& q) {
    std::string algo;
    for (char c : algo_in) algo += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    json out = {{"quant_algo", algo}};
    if (algo == "NVFP4" || algo == "W4A16_NVFP4" || algo == "MXFP8") {
      json gs = entry.value("group_size", q.value("group_size", json()));
      out["group_size"] = gs.is_null() ? json(algo == "MXFP8" ? 32 : 16) : gs;
    }
    return out;
  }

  std::optional<json> modelopt(const EngineModule& em) {
    const json& q = qc.contains("quantization") ? qc["quantization"] : qc;
    std::vector<std::string> ignore =
        string_list(q.contains("exclude_modules") ? q["exclude_modules"] : q.value("ignore", json::array()));
    const std::string& m = em.name;
    // 1. exact, fused shards all-or-none, experts substring-of-entry
    bool excluded = std::find(ignore.begin(), ignore.end(), m) != ignore.end();
    if (!excluded && em.kind == Kind::Fused) {
      std::size_t n = 0;
      for (const auto& s : em.members) n += std::count(ignore.begin(), ignore.end(), s) ? 1 : 0;
      if (n != 0 && n != em.members.size()) fail(fmt::format("shards of {} are partly excluded", m));
      excluded = n == em.members.size();
    }
    if (!excluded && contains(m, "experts")) {
      for (const auto& e : ignore) {
        if (contains(e, "experts") && contains(e, m)) excluded = true;
      }
    }
    // 2. substring, also without a leading language_model.
    std::string stripped = starts_with(m, "language_model.") ? m.substr(15) : m;
    for (const auto& e : ignore) {
      if (contains(m, e) || contains(stripped, e)) excluded = true;
      if (e.find('*') != std::string::npos && py_fnmatch(m, e)) excluded = true;  // 3.
    }
    for (const char* v : {"vision_tower", "vision_model", "vit_large_projector"}) {  // 4.
      if (contains(m, v)) excluded = true;
    }
    if (excluded) return std::nullopt;

    std::string algo = q.value("quant_algo", "");
    std::string up;
    for (char c : algo) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (up != "MIXED_PRECISION") {
      if (up.empty()) return std::nullopt;
      return normalize_modelopt_entry(up, json::object(), q);
    }
    const json ql = q.value("quantized_layers", json::object());
    if (ql.empty()) fail("MIXED_PRECISION needs a non-empty quantized_layers");
    auto entry_algo = [&](const json& e) { return e.value("quant_algo", ""); };
    // 1. direct key (with the lm_head and language_model spellings)
    std::vector<std::string> candidates = {m};
    if (last_component(m) == "lm_head") candidates.push_back("lm_head");
    for (const auto& [a, b] : {std::pair<std::string, std::string>{"language_model.model.", "model.language_model."},
                               {"model.language_model.", "language_model.model."}}) {
      if (starts_with(m, a)) candidates.push_back(b + m.substr(a.size()));
    }
    for (const auto& c : candidates) {
      if (ql.contains(c)) return normalize_modelopt_entry(entry_algo(ql[c]), ql[c], q);
    }
    // 2./5. fused shards
    if (em.kind == Kind::Fused) {
      std::optional<json> found;
      for (const auto& s : em.members) {
        if (!ql.contains(s)) continue;
        json e = normalize_modelopt_entry(entry_algo(ql[s]), ql[s], q);
        if (found && *found != e) fail(fmt::format("shards of {} have different quant_algo", m));
        found = e;
      }
      if (found) return found;
    }
    // 3. first key under the prefix
    for (const auto& [k, e] : ql.items()) {
      if (starts_with(k, m + ".")) return normalize_modelopt_entry(entry_algo(e), e, q);
    }
    // 4. experts: any key under the parent
    if (em.kind == Kind::Experts) {
      for (const auto& [k, e] : ql.items()) {
        if (starts_with(k, parent_of(m) + ".")) return normalize_modelopt_entry(entry_algo(e), e, q);
      }
    }
    return std::nullopt;
  }

  const std::optional<json>& resolve(const std::string& module) {
    const EngineModule& em = module_for(module);
    auto it = cache.find(em.name);
    if (it != cache.end()) return it->second;
    std::optional<json> r;
    if (!engine_never_quantizes(em.name)) {
      switch (engine) {
        case Engine::VllmCompressedTensors:
        case Engine::SglangCompressedTensors: r = ct(em); break;
        case Engine::VllmQuark:
        case Engine::SglangQuark:
        case Engine::AtomQuark: r = quark(em); break;
        case Engine::VllmModelOpt: r = modelopt(em); break;
      }
    }
    return cache[em.name] = std::move(r);
  }
};

EngineResolver::EngineResolver(Engine e, json qc, std::vector<std::string> all_modules)
    : impl_(std::make_unique<Impl>(e, std::move(qc), std::move(all_modules))) {}
EngineResolver::~EngineResolver() = default;
EngineResolver::EngineResolver(EngineResolver&&) noexcept = default;

const std::optional<json>& EngineResolver::resolve(const std::string& module) { return impl_->resolve(module); }
std::string EngineResolver::engine_module(const std::string& module) const {
  return impl_->module_for(module).name;
}

std::optional<json> resolve_layer(Engine e, const json& quantization_config, const std::string& module,
                                  const std::vector<std::string>& all_modules) {
  EngineResolver r(e, quantization_config, all_modules);
  return r.resolve(module);
}

std::vector<std::string> check_config_resolution(Dialect d, const ConfigInput& in, const json& qc) {
  std::vector<std::string> problems;
  std::vector<std::string> all;
  for (const auto& m : in.linear_modules) all.push_back(m.module);
  const json& src = in.source_quantization_config;
  bool kept_source = d == Dialect::CompressedTensors && src.is_object() && src.contains("config_groups");
  std::optional<std::pair<quant::SchemeSpec, json>> want_cache;  // consecutive modules share schemes
  for (Engine e : engines_for(d)) {
    EngineResolver r(e, qc, all);
    for (const auto& m : in.linear_modules) {
      const std::optional<json>* got_ptr = nullptr;
      try {
        got_ptr = &r.resolve(m.module);
      } catch (const Error& err) {
        problems.push_back(fmt::format("{}: {}: {}", engine_name(e), m.module, err.message()));
        continue;
      }
      const std::optional<json>& got = *got_ptr;
      if (m.preexisting && kept_source) {
        if (!got) problems.push_back(fmt::format("{}: {} was quantized in the source but resolves as float",
                                                 engine_name(e), m.module));
        continue;
      }
      if (m.scheme && (!want_cache || !(want_cache->first == *m.scheme)))
        want_cache.emplace(*m.scheme, scheme_config_json(d, *m.scheme));
      bool agree = m.scheme ? (got && *got == want_cache->second) : !got;
      if (!agree) {
        problems.push_back(fmt::format("{}: {} (engine module {}) resolves to {}, decided {}", engine_name(e),
                                       m.module, r.engine_module(m.module), got ? got->dump() : "float",
                                       m.scheme ? scheme_label(*m.scheme) : "float"));
      }
    }
  }
  return problems;
}

}  // namespace selq::exporter
