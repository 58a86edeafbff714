// Engine lookup mimics. Each function follows the numbered steps of
// ENGINES.md for its engine; keep them literal, including the engines'
// quirks (substring matching, expert-0 probing), because catching those
// quirks is the point.
#include "export/engine_resolve.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "core/error.h"
#include "export/dialect_internal.h"
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

std::vector<Engine> engines_for(Dialect d) { return detail::dialect_ops(d).engines; }

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
  if (pattern.starts_with("re:")) return py_re_match(pattern.substr(3), name);
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

// Kimi-scale models have ~70k modules and configs can list thousands of
// names, so every list an engine scans is indexed once per resolver and each
// index answers exactly what the literal scan would. Indexes are built where
// the engine first reads the field, so a malformed config throws at the same
// lookup as the literal code; a list holding a regex that does not compile
// keeps the literal scan, because where a scan throws depends on its order.

// Not noexcept: libstdc++ then stores each node's hash instead of rehashing
// keys while walking a bucket.
struct SvHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using NameSet = std::unordered_set<std::string, SvHash, std::equal_to<>>;
template <class V>
using NameMap = std::unordered_map<std::string, V, SvHash, std::equal_to<>>;

// "Is some needle a substring of s" (Python `needle in s`; empty needles never
// count, as in contains()). Probing s's substrings of each needle length beats
// a scan once there are more needles than substrings.
class NeedleSet {
 public:
  void add(std::string n) {
    if (n.empty() || !set_.insert(n).second) return;
    lens_.insert(n.size());
    list_.push_back(std::move(n));
  }
  bool any_in(std::string_view s) const {
    if (list_.size() <= 64) {
      for (const auto& n : list_) {
        if (s.find(n) != std::string_view::npos) return true;
      }
      return false;
    }
    for (std::size_t len : lens_) {
      if (len > s.size()) break;
      for (std::size_t i = 0; i + len <= s.size(); ++i) {
        if (set_.find(s.substr(i, len)) != set_.end()) return true;
      }
    }
    return false;
  }

 private:
  NameSet set_;
  std::set<std::size_t> lens_;
  std::vector<std::string> list_;
};

// `name` equals an entry or starts with "<entry>.".
bool has_name_or_dotted_prefix(const NameSet& set, std::string_view name) {
  if (set.find(name) != set.end()) return true;
  for (std::size_t p = name.find('.'); p != std::string_view::npos; p = name.find('.', p + 1)) {
    if (set.find(name.substr(0, p)) != set.end()) return true;
  }
  return false;
}

// Inserts `e` and every prefix of it that ends before a '.', so that "some
// entry equals n or starts with n + '.'" is one lookup of n.
void insert_with_dotted_prefixes(NameSet& set, const std::string& e) {
  for (std::size_t p = e.find('.'); p != std::string::npos; p = e.find('.', p + 1)) set.emplace(e.substr(0, p));
  set.insert(e);
}

bool regex_compiles(const std::string& pattern) {
  try {
    py_re_match(pattern, "");
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

}  // namespace

struct EngineResolver::Impl {
  Engine engine;
  json qc;
  std::vector<std::string> all;
  std::vector<EngineModule> ems;
  NameMap<std::size_t> index;  // checkpoint member or engine name -> ems index
  NameMap<std::optional<json>> cache;

  Impl(Engine e, json q, std::vector<std::string> a) : engine(e), qc(std::move(q)), all(std::move(a)) {
    ems = engine_modules(family_of(e), all);
    index.reserve(all.size() + ems.size());
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
  struct CtIgnore {
    std::vector<std::string> list;  // literal scan when a regex does not compile
    bool literal{false};
    NameSet exact;
    std::vector<std::string> res;   // patterns without "re:"
    NeedleSet lowered;              // SGLang: lower(pattern) in lower(name)
  };
  std::optional<CtIgnore> ct_ignore_idx;

  const CtIgnore& ct_ignore() {
    if (ct_ignore_idx) return *ct_ignore_idx;
    CtIgnore ix;
    ix.list = string_list(qc.value("ignore", json::array()));
    for (const auto& pat : ix.list) {
      if (pat.starts_with("re:")) {
        ix.res.push_back(pat.substr(3));
        ix.literal |= !regex_compiles(ix.res.back());
      } else {
        ix.exact.insert(pat);
        ix.lowered.add(lower(pat));
      }
    }
    return ct_ignore_idx.emplace(std::move(ix));
  }

  struct CtTargets {
    std::vector<std::pair<std::string, json>> list;  // target_scheme_map, in order
    NameMap<std::size_t> exact;                      // non-re target -> position
    std::vector<std::pair<std::size_t, std::string>> res;  // position, pattern without "re:"
    std::map<std::string, std::optional<std::size_t>> by_class;
  };
  std::optional<CtTargets> ct_targets_idx;

  CtTargets& ct_targets() {
    if (ct_targets_idx) return *ct_targets_idx;
    // 2. target_scheme_map in group order; a later group takes over a target.
    CtTargets ix;
    NameMap<std::size_t> pos;
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
        auto [it, fresh] = pos.try_emplace(t, ix.list.size());
        if (fresh) ix.list.emplace_back(t, scheme);
        else ix.list[it->second].second = scheme;
      }
    }
    for (std::size_t i = 0; i < ix.list.size(); ++i) {
      const std::string& t = ix.list[i].first;
      if (t.starts_with("re:")) ix.res.emplace_back(i, t.substr(3));
      else ix.exact.emplace(t, i);
    }
    return ct_targets_idx.emplace(std::move(ix));
  }

  bool ct_ignored_by(const CtIgnore& ix, const std::string& name, bool sglang) const {
    if (ix.literal) {
      for (const auto& pat : ix.list) {
        if (exact_or_re_match(name, pat)) return true;
        if (sglang && !pat.starts_with("re:") && contains(lower(name), lower(pat))) return true;
      }
      return false;
    }
    if (ix.exact.count(name)) return true;
    for (const auto& re : ix.res) {
      if (py_re_match(re, name)) return true;
    }
    return sglang && ix.lowered.any_in(lower(name));
  }

  // The first target (in target_scheme_map order) that is `name` or whose
  // regex matches it: the exact hit's position bounds the regexes to try.
  static std::optional<std::size_t> ct_first_target(const CtTargets& ix, const std::string& name) {
    std::size_t best = std::string::npos;
    if (auto it = ix.exact.find(name); it != ix.exact.end()) best = it->second;
    for (const auto& [i, re] : ix.res) {
      if (i >= best) break;
      if (py_re_match(re, name)) return i;
    }
    if (best == std::string::npos) return std::nullopt;
    return best;
  }

  std::optional<json> ct_linear(const std::string& prefix, Kind kind, const std::vector<std::string>& shards,
                                const std::string& cls) {
    bool sglang = engine == Engine::SglangCompressedTensors;
    const CtIgnore& ign = ct_ignore();
    // 1. should_ignore_layer
    bool ignored = ct_ignored_by(ign, prefix, sglang);
    if (!ignored && kind == Kind::Fused) {
      std::size_t n = 0;
      for (const auto& s : shards) n += ct_ignored_by(ign, s, sglang) ? 1 : 0;
      if (n != 0 && n != shards.size())
        fail(fmt::format("shards of {} are partly ignored; vLLM requires all to use the same scheme", prefix));
      ignored = n == shards.size();
    }
    if (ignored) return std::nullopt;

    CtTargets& ix = ct_targets();
    if (auto i = ct_first_target(ix, prefix)) return ix.list[*i].second;
    if (kind == Kind::Fused) {
      std::optional<json> first;
      bool all_matched = true;
      for (const auto& shard : shards) {
        auto i = ct_first_target(ix, shard);
        if (!i) { all_matched = false; break; }
        if (!first) first = ix.list[*i].second;
      }
      if (all_matched && first) return first;
    }
    // Class-name targets depend on the class only.
    auto [cit, fresh] = ix.by_class.try_emplace(cls);
    if (fresh) {
      std::string lc = lower(cls);
      for (std::size_t i = 0; i < ix.list.size(); ++i) {
        const std::string& t = ix.list[i].first;
        if (t.starts_with("re:")) continue;
        if (contains(lc, lower(t)) || (cls == "RoutedExperts" && t == "Linear")) {
          cit->second = i;
          break;
        }
      }
    }
    if (cit->second) return ix.list[*cit->second].second;
    // The head is not a LinearBase: no target, no scheme, and SGLang does not ask.
    if (sglang && cls != "ParallelLMHead")
      fail(fmt::format("Unable to find matching target for {} in the compressed-tensors config", prefix));
    return std::nullopt;
  }

  // vLLM's compressed-tensors scheme picker runs int weight-only (W4A16,
  // W8A16) only from `pack-quantized` (CompressedTensorsWNA16); a weight-only
  // `int-quantized` group fails at config parsing (docs/ENGINE_RULES.md,
  // "INT weight-only" in docs/ENGINE_RULES.md).
  void ct_require_vllm_scheme(const std::string& prefix, const json& scheme) const {
    const auto w = scheme.find("weights");
    if (w == scheme.end() || !w->is_object() || w->value("type", json()) != json("int")) return;
    const auto in = scheme.find("input_activations");
    if (in != scheme.end() && !in->is_null()) return;
    json format = scheme.value("format", json());
    if (!format.is_string()) format = qc.value("format", json());
    if (format != json("pack-quantized"))
      fail(fmt::format("{}: int{} weight-only is loaded only from format 'pack-quantized', not {}", prefix,
                       w->value("num_bits", json()).dump(), format.dump()));
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

  struct QuarkExclude {
    std::vector<std::string> list;  // after ATOM's rewrite; literal scan when a regex does not compile
    bool literal{false};
    NameSet exact;                  // vLLM/SGLang: non-re entries
    NameSet plain;                  // ATOM: entries neither re: nor glob (exact or dotted prefix)
    std::vector<std::string> res;   // patterns without "re:"
    std::vector<std::string> globs; // ATOM fnmatch entries
    NameSet under;                  // non-re entries and their dotted prefixes (experts rule)
  };
  std::optional<QuarkExclude> quark_excl_idx;

  const QuarkExclude& quark_exclude() {
    if (quark_excl_idx) return *quark_excl_idx;
    QuarkExclude ix;
    ix.list = string_list(qc.value("exclude", json::array()));
    if (engine == Engine::AtomQuark) {
      for (auto& e : ix.list) e = atom_rewrite(e);
    }
    for (const auto& e : ix.list) {
      if (e.starts_with("re:")) {
        ix.res.push_back(e.substr(3));
        ix.literal |= !regex_compiles(ix.res.back());
        continue;
      }
      ix.exact.insert(e);
      insert_with_dotted_prefixes(ix.under, e);
      if (e.find_first_of("*?[") != std::string::npos) ix.globs.push_back(e);
      else ix.plain.insert(e);
    }
    return quark_excl_idx.emplace(std::move(ix));
  }

  bool quark_excluded_name(const std::string& name, const QuarkExclude& ix) const {
    bool atom = engine == Engine::AtomQuark;
    if (ix.literal) {
      for (const auto& e : ix.list) {
        if (atom) {
          if (e.starts_with("re:")) {
            if (py_re_search(e.substr(3), name)) return true;
          } else if (e.find_first_of("*?[") != std::string::npos) {
            if (py_fnmatch(name, e)) return true;
          } else if (name == e || name.starts_with(e + ".")) {
            return true;
          }
        } else if (exact_or_re_match(name, e)) {
          return true;
        }
      }
      return false;
    }
    if (!atom) {
      if (ix.exact.count(name)) return true;
      for (const auto& re : ix.res) {
        if (py_re_match(re, name)) return true;
      }
      return false;
    }
    if (has_name_or_dotted_prefix(ix.plain, name)) return true;
    for (const auto& g : ix.globs) {
      if (py_fnmatch(name, g)) return true;
    }
    for (const auto& re : ix.res) {
      if (py_re_search(re, name)) return true;
    }
    return false;
  }

  struct QuarkLayers {
    std::vector<std::pair<std::string, json>> keys;  // layer_quant_config in iteration order, ATOM-rewritten
    json global;
  };
  std::optional<QuarkLayers> quark_layers_idx;

  const QuarkLayers& quark_layers() {
    if (quark_layers_idx) return *quark_layers_idx;
    QuarkLayers ix;
    const json lqc = qc.value("layer_quant_config", json::object());
    for (const auto& [key0, cfg] : lqc.items())
      ix.keys.emplace_back(engine == Engine::AtomQuark ? atom_rewrite(key0) : key0, cfg);
    ix.global = qc.value("global_quant_config", json());
    return quark_layers_idx.emplace(std::move(ix));
  }

  std::optional<json> quark(const EngineModule& em) {
    // Quark configs reach LinearBase, attention and MoE layers only: a head
    // (ParallelLMHead) is never quantized (vLLM quark.py, docs/ENGINE_RULES.md "Tied heads").
    if (class_name_of(em) == "ParallelLMHead") return std::nullopt;
    bool atom = engine == Engine::AtomQuark;
    bool sglang = engine == Engine::SglangQuark;
    const QuarkExclude& excl = quark_exclude();
    // 1. exclude
    bool excluded = quark_excluded_name(em.name, excl);
    if (!excluded && em.kind == Kind::Fused && !atom) {
      std::size_t n = 0;
      for (const auto& s : em.members) n += quark_excluded_name(s, excl) ? 1 : 0;
      if (n != 0 && n != em.members.size())
        fail(fmt::format("shards of {} are partly excluded", em.name));
      excluded = n == em.members.size();
    }
    // Any non-re entry equal to the experts module or under it.
    if (!excluded && em.kind == Kind::Experts) excluded = excl.under.count(em.name) != 0;
    if (excluded) return std::nullopt;

    // 2. layer_quant_config (3. layer_type_quant_config is dead for string keys), global.
    const QuarkLayers& lq = quark_layers();
    auto lookup = [&](const std::string& name) -> const json& {
      for (const auto& [key, cfg] : lq.keys) {
        bool hit = sglang || key.find('*') != std::string::npos ? py_fnmatch(name, key) : contains(key, name);
        if (hit) return cfg;
      }
      return lq.global;
    };
    std::vector<std::string> names =
        (em.kind == Kind::Fused && !atom) ? em.members : std::vector<std::string>{em.name};
    const json& first = lookup(names[0]);
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

  struct ModelOptIgnore {
    NameSet exact;
    std::vector<std::string> with_experts;  // entries containing "experts"
    NeedleSet needles;                      // entries as substrings of the name
    std::vector<std::string> globs;         // entries with '*'
  };
  std::optional<ModelOptIgnore> modelopt_ignore_idx;

  const ModelOptIgnore& modelopt_ignore(const json& q) {
    if (modelopt_ignore_idx) return *modelopt_ignore_idx;
    ModelOptIgnore ix;
    for (auto& e : string_list(q.contains("exclude_modules") ? q["exclude_modules"]
                                                              : q.value("ignore", json::array()))) {
      if (contains(e, "experts")) ix.with_experts.push_back(e);
      if (e.find('*') != std::string::npos) ix.globs.push_back(e);
      ix.needles.add(e);
      ix.exact.insert(std::move(e));
    }
    return modelopt_ignore_idx.emplace(std::move(ix));
  }

  // The first key of `ql` (in iteration order, which is key order) starting
  // with `prefix`.
  static const json* first_key_under(const json& ql, const std::string& prefix) {
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

  std::optional<json> modelopt(const EngineModule& em) {
    const json& q = qc.contains("quantization") ? qc["quantization"] : qc;
    const ModelOptIgnore& ign = modelopt_ignore(q);
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
    if (excluded) return std::nullopt;

    std::string algo = q.value("quant_algo", "");
    std::string up;
    for (char c : algo) up += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (up != "MIXED_PRECISION") {
      if (up.empty()) return std::nullopt;
      return normalize_modelopt_entry(up, json::object(), q);
    }
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
    if (const json* e = first_key_under(ql, m + ".")) return normalize_modelopt_entry(entry_algo(*e), *e, q);
    // 4. experts: any key under the parent
    if (em.kind == Kind::Experts) {
      if (const json* e = first_key_under(ql, parent_of(m) + "."))
        return normalize_modelopt_entry(entry_algo(*e), *e, q);
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
        case Engine::SglangCompressedTensors:
          r = ct(em);
          if (r && engine == Engine::VllmCompressedTensors) ct_require_vllm_scheme(em.name, *r);
          break;
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

std::optional<std::string> unstored_head_problem(EngineResolver& r, Engine e, const std::string& head) {
  try {
    if (const auto& got = r.resolve(head))
      return fmt::format("{}: {} has no stored weight (it shares the embedding's) but would be built quantized as "
                         "{}, with no scales to load: it must be excluded",
                         engine_name(e), head, got->dump());
  } catch (const Error& err) {
    return fmt::format("{}: {}: {}", engine_name(e), head, err.message());
  }
  return std::nullopt;
}

std::vector<std::string> check_config_resolution(Dialect d, const ConfigInput& in, const json& qc) {
  std::vector<std::string> problems;
  std::vector<std::string> all;
  for (const auto& m : in.linear_modules) all.push_back(m.module);
  // The engines build the unstored heads too; they resolve like any module.
  all.insert(all.end(), in.unstored_heads.begin(), in.unstored_heads.end());
  const json& src = in.source_quantization_config;
  bool kept_source = d == Dialect::CompressedTensors && src.is_object() && src.contains("config_groups");
  std::optional<std::pair<quant::SchemeSpec, json>> want_cache;  // consecutive modules share schemes
  std::size_t want_generation = 0;
  for (Engine e : engines_for(d)) {
    EngineResolver r(e, qc, all);
    for (const auto& h : in.unstored_heads)
      if (auto p = unstored_head_problem(r, e, h)) problems.push_back(*p);
    const std::optional<json>* memo_got = nullptr;  // resolver results keep their address
    std::size_t memo_generation = 0;
    bool memo_agree = false;
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
      if (m.scheme && (!want_cache || !(want_cache->first == *m.scheme))) {
        want_cache.emplace(*m.scheme, scheme_config_json(d, *m.scheme));
        ++want_generation;
      }
      // The members of one engine module share one cached result; compare it
      // with the decided scheme once per run of members, not per member.
      bool agree;
      if (!m.scheme) {
        agree = !got;
      } else if (got_ptr == memo_got && want_generation == memo_generation) {
        agree = memo_agree;
      } else {
        agree = got && *got == want_cache->second;
        memo_got = got_ptr;
        memo_generation = want_generation;
        memo_agree = agree;
      }
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
