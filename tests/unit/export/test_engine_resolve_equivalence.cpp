// The indexed EngineResolver must answer exactly as the literal scans it
// replaced (first-match order, exact-vs-regex precedence, substring and
// fnmatch rules). The oracle below is that literal implementation, kept
// verbatim as it was before indexing; every module of hand-picked tricky
// configs and of randomized configs is resolved by both and compared,
// thrown errors included.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <random>
#include <regex>

#include <fmt/format.h>

#include "core/error.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"

namespace selq::exporter {
namespace {

using nlohmann::json;
using Kind = EngineModule::Kind;

// The oracle's own helpers, kept apart from the resolver's (export/engine_resolve_internal.h)
// so that the oracle does not share the code it checks.
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


// ---- the oracle: the pre-index resolver, unchanged ----
struct Oracle {
  Engine engine;
  json qc;
  std::vector<std::string> all;
  std::vector<EngineModule> ems;
  std::map<std::string, std::size_t> index;  // checkpoint member or engine name -> ems index
  std::map<std::string, std::optional<json>> cache;

  Oracle(Engine e, json q, std::vector<std::string> a) : engine(e), qc(std::move(q)), all(std::move(a)) {
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

  // ---------------- compressed-tensors (docs/ENGINE_RULES.md §1.2) ----------------
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
    if (sglang && cls != "ParallelLMHead")
      fail(fmt::format("Unable to find matching target for {} in the compressed-tensors config", prefix));
    return std::nullopt;
  }

  std::optional<json> ct(const EngineModule& em) {
    if (em.kind != Kind::Experts) return ct_linear(em.name, em.kind, em.members, class_name_of(em));
    // §1.2 routed experts: only expert 0's projections are probed, and they must agree.
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

  // ---------------- Quark (docs/ENGINE_RULES.md §2.2, §4) ----------------
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
    // Quark configs reach LinearBase, attention and MoE layers only: a head
    // (ParallelLMHead) is never quantized (vLLM quark.py, docs/ENGINE_RULES.md "Tied heads").
    if (class_name_of(em) == "ParallelLMHead") return std::nullopt;
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

  // ---------------- ModelOpt (docs/ENGINE_RULES.md §3) ----------------
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


// "float", a scheme dump, or "throws: <message>".
template <class F>
std::string outcome(F&& f) {
  try {
    const std::optional<json>& r = f();
    return r ? r->dump() : std::string("float");
  } catch (const Error& e) {
    return "throws: " + e.message();
  } catch (const std::exception& e) {
    return std::string("throws std: ") + e.what();
  }
}

const Engine kEngines[] = {Engine::VllmCompressedTensors, Engine::SglangCompressedTensors, Engine::VllmQuark,
                           Engine::SglangQuark,           Engine::AtomQuark,               Engine::VllmModelOpt};

// Resolves every module, every engine module and a few unknown names with
// both resolvers; returns how many lookups were compared.
std::size_t expect_same(Engine e, const json& qc, const std::vector<std::string>& all, const std::string& what) {
  EngineResolver fast(e, qc, all);
  Oracle slow(e, qc, all);
  std::vector<std::string> names = all;
  for (const auto& em : engine_modules(family_of(e), all)) names.push_back(em.name);
  names.push_back("not.a.module");
  names.push_back("lm_head");
  std::size_t n = 0;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass reads the caches
    for (const auto& m : names) {
      std::string a = outcome([&]() -> const std::optional<json>& { return fast.resolve(m); });
      std::string b = outcome([&]() -> const std::optional<json>& { return slow.resolve(m); });
      EXPECT_EQ(a, b) << engine_name(e) << " " << what << " module " << m << "\nconfig " << qc.dump();
      if (a != b) return n;
      ++n;
    }
  }
  return n;
}

void expect_same_all_engines(const json& qc, const std::vector<std::string>& all, const std::string& what) {
  for (Engine e : kEngines) expect_same(e, qc, all, what);
}

std::vector<std::string> moe_modules(int layers, int experts) {
  std::vector<std::string> out = {"vision_tower.blocks.0.attn.qkv", "mm_projector.linear_1"};
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                          "self_attn.kv_b_proj", "self_attn.o_proj", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj"})
      out.push_back(p + m);
    if (l == 0) {
      for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) out.push_back(p + m);
      continue;
    }
    out.push_back(p + "mlp.gate");
    for (int x = 0; x < experts; ++x)
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        out.push_back(p + "mlp.experts." + std::to_string(x) + "." + m);
    for (const char* m : {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"})
      out.push_back(p + m);
  }
  out.push_back("language_model.model.layers.0.mlp.down_proj");
  out.push_back("lm_head");
  return out;
}

json ct_scheme(int bits) {
  return {{"weights", {{"num_bits", bits}, {"type", "float"}}}, {"input_activations", nullptr}, {"format", "x"}};
}
json quark_cfg(const std::string& dtype) { return {{"weight", {{"dtype", dtype}}}, {"input_tensors", nullptr}}; }

TEST(EngineResolveSameAsLiteral, CtExactIgnoreVersusRegexTargetAndGroupOrder) {
  auto all = moe_modules(3, 4);
  json g0 = ct_scheme(8), g1 = ct_scheme(4), g2 = ct_scheme(6);
  // A module ignored by exact name and also matched by a regex target; a
  // target repeated in a later group (takes over the scheme, keeps its
  // position); a regex listed before an exact target that both match.
  g0["targets"] = {"re:.*self_attn\\..*", "model.layers.1.self_attn.o_proj", "model.layers.2.self_attn.o_proj"};
  g1["targets"] = {"model.layers.1.self_attn.o_proj", "re:.*experts\\.\\d+\\.(gate|up)_proj$", "Linear"};
  g2["targets"] = {"model.layers.2.self_attn.q_b_proj", "re:.*\\.down_proj$"};
  json qc = {{"format", "mixed-precision"},
             {"config_groups", {{"group_0", g0}, {"group_1", g1}, {"group_2", g2}}},
             {"ignore", {"model.layers.1.self_attn.kv_b_proj", "re:.*mlp\\.gate$", "LM_HEAD", "Vision_Tower"}}};
  expect_same_all_engines(qc, all, "ct tricky");
  // vLLM: the exactly ignored module is float though a regex target matches it.
  EXPECT_FALSE(EngineResolver(Engine::VllmCompressedTensors, qc, all).resolve("model.layers.1.self_attn.kv_b_proj"));
  // The exact target comes after the regex: the regex's group wins.
  json want = g0;
  want.erase("targets");
  want["output_activations"] = nullptr;
  EXPECT_EQ(*EngineResolver(Engine::VllmCompressedTensors, qc, all).resolve("model.layers.2.self_attn.o_proj"), want);
}

TEST(EngineResolveSameAsLiteral, CtLongIgnoreListsAndBadRegex) {
  auto all = moe_modules(4, 3);
  std::vector<std::string> ignore;
  for (std::size_t i = 0; i < all.size(); i += 2) ignore.push_back(all[i]);
  for (int i = 0; i < 100; ++i) ignore.push_back("unrelated.name." + std::to_string(i));
  ignore.push_back("SELF_ATTN.Q_B");  // SGLang: case-insensitive substring
  ignore.push_back("KV_B_PROJ");      // ... also at the end of the name
  json g = ct_scheme(8);
  g["targets"] = {"Linear"};
  json qc = {{"format", "float-quantized"}, {"config_groups", {{"group_0", g}}}, {"ignore", ignore}};
  expect_same_all_engines(qc, all, "ct long ignore");
  qc["ignore"].push_back("re:model.layers.1.(");  // does not compile
  qc["ignore"].push_back("model.layers.3.mlp.gate");
  expect_same_all_engines(qc, all, "ct bad regex");
}

TEST(EngineResolveSameAsLiteral, QuarkKeySubstringsGlobsAndExcludes) {
  auto all = moe_modules(3, 4);
  json a = quark_cfg("a"), b = quark_cfg("b"), c = quark_cfg("c");
  // "language_model.model.layers.1..." contains the name "model.layers.1..."
  // (vLLM's name-in-key rule); a star key sorts before a plain key.
  json lqc = {{"language_model.model.layers.1.self_attn.o_proj", a},
              {"model.layers.1.self_attn.o_proj", b},
              {"model.layers.2.mlp.experts", c},
              {"model.layers.2.mlp.experts.0.up_proj", a},
              {"model.layers.*.self_attn.q_b_proj", c},
              {"model.layers.0.self_attn.q_proj", a},
              {"model.layers.0.self_attn.k_proj", a},
              {"model.layers.0.self_attn.v_proj", a}};
  json qc = {{"global_quant_config", quark_cfg("g")},
             {"layer_quant_config", lqc},
             {"exclude",
              {"model.layers.1.mlp.experts.2.down_proj", "model.layers.0.mlp", "re:.*kv_b_proj$", "*.gate",
               "model.layers.2.self_attn.q_proj", "model.layers.2.self_attn.k_proj",
               "model.layers.2.self_attn.v_proj", "lm_head"}}};
  expect_same_all_engines(qc, all, "quark tricky");
  // The experts module is float because one of its experts is excluded.
  EXPECT_FALSE(EngineResolver(Engine::VllmQuark, qc, all).resolve("model.layers.1.mlp.experts.0.up_proj"));
  // vLLM's substring rule: the first key (in key order) containing the name.
  EXPECT_EQ(*EngineResolver(Engine::VllmQuark, qc, all).resolve("model.layers.1.self_attn.o_proj"), a);
  EXPECT_EQ(*EngineResolver(Engine::SglangQuark, qc, all).resolve("model.layers.1.self_attn.o_proj"), b);
  // Partly excluded fused q/k/v and a bad regex fall back to the literal scan.
  qc["exclude"] = {"model.layers.2.self_attn.q_proj", "re:(", "model.layers.0.self_attn.o_proj"};
  expect_same_all_engines(qc, all, "quark bad regex");
  std::vector<std::string> many;
  for (std::size_t i = 1; i < all.size(); i += 3) many.push_back(all[i]);
  qc["exclude"] = many;
  expect_same_all_engines(qc, all, "quark long exclude");
}

TEST(EngineResolveSameAsLiteral, ModelOptSubstringsPrefixesAndMixedKeys) {
  auto all = moe_modules(12, 3);
  std::vector<std::string> ignore = {"model.layers.1.", "vision", "*.o_proj", "language_model.model.layers.0",
                                     "layers.11.mlp.experts.1", "kv_b_proj"};
  json mixed = {{"quant_method", "modelopt"},
                {"quant_algo", "MIXED_PRECISION"},
                {"ignore", ignore},
                {"quantized_layers",
                 {{"model.layers.2.mlp.experts.1.up_proj", {{"quant_algo", "FP8"}}},
                  {"model.layers.2.mlp.experts.0.up_proj", {{"quant_algo", "nvfp4"}, {"group_size", 32}}},
                  {"model.layers.3.mlp.shared", {{"quant_algo", "fp8"}}},
                  {"model.layers.3.self_attn.q_a_proj", {{"quant_algo", "FP8"}}},
                  {"model.layers.3.self_attn.kv_a_proj_with_mqa", {{"quant_algo", "NVFP4"}}},
                  {"model.layers.4.self_attn.q_a_proj", {{"quant_algo", "FP8"}}},
                  {"lm_head", {{"quant_algo", "MXFP8"}}}}}};
  expect_same_all_engines(mixed, all, "modelopt mixed");
  for (int i = 0; i < 80; ++i) ignore.push_back(fmt::format("x{}.y", i));  // past the scan threshold
  mixed["ignore"] = ignore;
  expect_same_all_engines(mixed, all, "modelopt long ignore");
  json hf = {{"quantization", {{"quant_algo", "FP8"}, {"exclude_modules", ignore}}}};
  expect_same_all_engines(hf, all, "modelopt hf");
}

// Random configs built from pieces of the model's own names, so that exact,
// prefix, substring, glob and regex entries hit and overlap.
TEST(EngineResolveSameAsLiteral, RandomConfigs) {
  std::mt19937 rng(20261130);
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  std::size_t compared = 0;
  for (int round = 0; round < 60; ++round) {
    auto all = moe_modules(2 + static_cast<int>(pick(4)), 1 + static_cast<int>(pick(3)));
    auto piece = [&]() -> std::string {
      const std::string& m = all[pick(all.size())];
      switch (pick(9)) {
        case 0: return m;
        case 1: return parent_of(m);
        case 2: { std::size_t a = pick(m.size()); return m.substr(a, 1 + pick(m.size() - a)); }
        case 3: return "re:" + regex_escape(parent_of(m)) + "\\..*";
        case 4: return "re:.*" + regex_escape(last_component(m)) + (pick(2) ? "$" : "");
        case 5: return parent_of(parent_of(m)) + ".*";
        case 6: return "*" + last_component(m);
        case 7: { std::string s = m; for (auto& ch : s) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch))); return s; }
        default: return "language_model." + m;
      }
    };
    auto list = [&](std::size_t max) {
      json out = json::array();
      std::size_t n = pick(max + 1);
      for (std::size_t i = 0; i < n; ++i) out.push_back(piece());
      return out;
    };
    std::size_t big = round % 3 == 0 ? 150 : 12;  // long lists take the hashed paths
    // compressed-tensors
    json groups = json::object();
    for (std::size_t gi = 0, ng = 1 + pick(3); gi < ng; ++gi) {
      json g = ct_scheme(static_cast<int>(4 + gi));
      g["targets"] = list(big);
      if (pick(4) == 0) g["targets"].push_back(pick(2) ? "Linear" : "RowParallelLinear");
      groups["group_" + std::to_string(gi)] = g;
    }
    json ct = {{"format", "f"}, {"config_groups", groups}, {"ignore", list(big)}};
    // quark
    json lqc = json::object();
    for (std::size_t i = 0, n = pick(big + 1); i < n; ++i) lqc[piece()] = quark_cfg(std::to_string(pick(3)));
    json quark = {{"global_quant_config", pick(4) ? quark_cfg("g") : json()}, {"layer_quant_config", lqc},
                  {"exclude", list(big)}};
    // modelopt
    json ql = json::object();
    for (std::size_t i = 0, n = pick(big + 1); i < n; ++i)
      ql[piece()] = {{"quant_algo", pick(2) ? "FP8" : "NVFP4"}};
    json mo = {{"quant_algo", pick(3) ? "MIXED_PRECISION" : "FP8"}, {"ignore", list(big)}, {"quantized_layers", ql}};
    for (Engine e : {Engine::VllmCompressedTensors, Engine::SglangCompressedTensors})
      compared += expect_same(e, ct, all, "random ct " + std::to_string(round));
    for (Engine e : {Engine::VllmQuark, Engine::SglangQuark, Engine::AtomQuark})
      compared += expect_same(e, quark, all, "random quark " + std::to_string(round));
    compared += expect_same(Engine::VllmModelOpt, mo, all, "random modelopt " + std::to_string(round));
    if (HasFailure()) break;
  }
  EXPECT_GT(compared, 10000u);
}

}  // namespace
}  // namespace selq::exporter
