// Engine lookup mimics: what every engine shares (mapping checkpoint names to
// engine modules, the modules no engine quantizes, the cache, the indexed
// name sets) and the self-check over a whole config. Each dialect's own rules
// are in engine_resolve_<dialect>.cpp, beside its writer dialect_<dialect>.cpp.
#include "export/engine_resolve.h"

#include <map>
#include <regex>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.h"
#include "export/dialect_internal.h"
#include "export/engine_resolve_internal.h"
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

namespace detail {

void EngineRules::fail(const std::string& what) const {
  throw_bad_input(fmt::format("{} would raise: {}", engine_name(engine_), what));
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

bool regex_compiles(const std::string& pattern) {
  try {
    py_re_match(pattern, "");
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

bool has_name_or_dotted_prefix(const NameSet& set, std::string_view name) {
  if (set.find(name) != set.end()) return true;
  for (std::size_t p = name.find('.'); p != std::string_view::npos; p = name.find('.', p + 1)) {
    if (set.find(name.substr(0, p)) != set.end()) return true;
  }
  return false;
}

void insert_with_dotted_prefixes(NameSet& set, const std::string& e) {
  for (std::size_t p = e.find('.'); p != std::string::npos; p = e.find('.', p + 1)) set.emplace(e.substr(0, p));
  set.insert(e);
}

}  // namespace detail

namespace {

EngineFamily family_of(Engine e) {
  switch (e) {
    case Engine::SglangCompressedTensors:
    case Engine::SglangQuark: return EngineFamily::Sglang;
    case Engine::AtomQuark: return EngineFamily::Atom;
    default: return EngineFamily::Vllm;
  }
}

std::unique_ptr<detail::EngineRules> rules_for(Engine e, const json& qc) {
  switch (e) {
    case Engine::VllmCompressedTensors:
    case Engine::SglangCompressedTensors: return detail::ct_rules(e, qc);
    case Engine::VllmQuark:
    case Engine::SglangQuark:
    case Engine::AtomQuark: return detail::quark_rules(e, qc);
    case Engine::VllmModelOpt: return detail::modelopt_rules(e, qc);
  }
  throw std::logic_error("rules_for: not an Engine");
}

}  // namespace

struct EngineResolver::Impl {
  json qc;
  std::vector<std::string> all;
  std::vector<EngineModule> ems;
  detail::NameMap<std::size_t> index;  // checkpoint member or engine name -> ems index
  detail::NameMap<std::optional<json>> cache;
  std::unique_ptr<detail::EngineRules> rules;  // refers to qc, so declared after it

  Impl(Engine e, json q, std::vector<std::string> a)
      : qc(std::move(q)), all(std::move(a)), rules(rules_for(e, qc)) {
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

  const std::optional<json>& resolve(const std::string& module) {
    const EngineModule& em = module_for(module);
    auto it = cache.find(em.name);
    if (it != cache.end()) return it->second;
    std::optional<json> r;
    if (!engine_never_quantizes(em.name)) r = rules->resolve(em);
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
