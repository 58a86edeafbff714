// How vLLM, SGLang and ATOM find a module's Quark layer config (docs/ENGINE_RULES.md
// §2.2, §4): `exclude` (ATOM: exact, dotted prefix, fnmatch or re.search;
// the others: exact or re.match; an experts module also by a non-`re:` entry at
// or under it), then the first matching `layer_quant_config` key (vLLM and
// ATOM: the name as a substring of the key unless the key has '*'; SGLang:
// fnmatch), else `global_quant_config`. ATOM rewrites exclude entries and
// keys to its fused names first and looks a fused module up by its own name.
// Keep the steps literal, quirks included: catching them is the point.
#include <fmt/format.h>

#include "export/engine_resolve_internal.h"

namespace selq::exporter::detail {
namespace {

using nlohmann::json;
using Kind = EngineModule::Kind;

// ATOM renames a shard suffix (".q_proj", ".q_proj*") to its fused module's.
std::string atom_rewrite(std::string s) {
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

struct QuarkLayers {
  std::vector<std::pair<std::string, json>> keys;  // layer_quant_config in iteration order, ATOM-rewritten
  json global;
};

// The exclude scan entry by entry, for a list holding a regex that does not compile.
bool excluded_literally(const QuarkExclude& ix, const std::string& name, bool atom) {
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

bool excluded_name(const QuarkExclude& ix, const std::string& name, bool atom) {
  if (ix.literal) return excluded_literally(ix, name, atom);
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

class QuarkRules final : public EngineRules {
 public:
  using EngineRules::EngineRules;

  std::optional<json> resolve(const EngineModule& em) override {
    // Quark configs reach LinearBase, attention and MoE layers only: a head
    // (ParallelLMHead) is never quantized (vLLM quark.py, docs/ENGINE_RULES.md "Tied heads").
    if (class_name_of(em) == "ParallelLMHead") return std::nullopt;
    if (in_exclude(em)) return std::nullopt;
    return layer_config(em);
  }

 private:
  std::optional<QuarkExclude> exclude_idx_;
  std::optional<QuarkLayers> layers_idx_;

  bool atom() const { return engine_ == Engine::AtomQuark; }

  const QuarkExclude& exclude() {
    if (exclude_idx_) return *exclude_idx_;
    QuarkExclude ix;
    ix.list = string_list(qc_.value("exclude", json::array()));
    if (atom()) {
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
    return exclude_idx_.emplace(std::move(ix));
  }

  const QuarkLayers& layers() {
    if (layers_idx_) return *layers_idx_;
    QuarkLayers ix;
    const json lqc = qc_.value("layer_quant_config", json::object());
    for (const auto& [key0, cfg] : lqc.items()) ix.keys.emplace_back(atom() ? atom_rewrite(key0) : key0, cfg);
    ix.global = qc_.value("global_quant_config", json());
    return layers_idx_.emplace(std::move(ix));
  }

  // 1. exclude
  bool in_exclude(const EngineModule& em) {
    const QuarkExclude& excl = exclude();
    bool excluded = excluded_name(excl, em.name, atom());
    if (!excluded && em.kind == Kind::Fused && !atom()) {
      std::size_t n = 0;
      for (const auto& s : em.members) n += excluded_name(excl, s, atom()) ? 1 : 0;
      if (n != 0 && n != em.members.size())
        fail(fmt::format("shards of {} are partly excluded", em.name));
      excluded = n == em.members.size();
    }
    // Any non-re entry equal to the experts module or under it.
    if (!excluded && em.kind == Kind::Experts) excluded = excl.under.count(em.name) != 0;
    return excluded;
  }

  // 2. layer_quant_config (3. layer_type_quant_config is dead for string keys), global.
  std::optional<json> layer_config(const EngineModule& em) {
    bool sglang = engine_ == Engine::SglangQuark;
    const QuarkLayers& lq = layers();
    auto lookup = [&](const std::string& name) -> const json& {
      for (const auto& [key, cfg] : lq.keys) {
        bool hit = sglang || key.find('*') != std::string::npos ? py_fnmatch(name, key) : contains(key, name);
        if (hit) return cfg;
      }
      return lq.global;
    };
    std::vector<std::string> names =
        (em.kind == Kind::Fused && !atom()) ? em.members : std::vector<std::string>{em.name};
    const json& first = lookup(names[0]);
    for (std::size_t i = 1; i < names.size(); ++i) {
      if (lookup(names[i]) != first)
        fail(fmt::format("shards of {} resolve to different layer configs", em.name));
    }
    if (first.is_null() || first.value("weight", json()).is_null()) return std::nullopt;
    return first;
  }
};

}  // namespace

std::unique_ptr<EngineRules> quark_rules(Engine e, const json& qc) { return std::make_unique<QuarkRules>(e, qc); }

}  // namespace selq::exporter::detail
