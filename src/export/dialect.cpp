// Dispatch from the Dialect enum to each dialect's DialectOps, and what the
// dialects share: Quark's and ModelOpt's common adapt, scheme grouping, the
// fused/expert consistency rule, expert name compression, and the post-build
// self-check against the engine resolvers (a config that some engine would
// resolve differently from the decisions is never written).
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "export/dialect.h"
#include "export/dialect_internal.h"
#include "quant/scheme_traits.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"

namespace selq::exporter {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

namespace detail {

const DialectOps& dialect_ops(Dialect d) {
  switch (d) {
    case Dialect::CompressedTensors: return ct_ops();
    case Dialect::Quark: return quark_ops();
    case Dialect::ModelOpt: return modelopt_ops();
  }
  throw std::logic_error("dialect_ops: not a Dialect");
}

}  // namespace detail

using detail::dialect_ops;

std::string dialect_name(Dialect d) { return kDialectNames.at(static_cast<std::size_t>(d)); }

std::string dialect_names_text() {
  std::string s;
  for (std::size_t i = 0; i < kDialectNames.size(); ++i)
    s += (i == 0 ? "" : i + 1 == kDialectNames.size() ? " or " : ", ") + std::string(kDialectNames[i]);
  return s;
}

std::string readable_quant_methods_text() {
  std::string s;
  for (const char* n : kDialectNames) s += std::string(n) + ", ";
  return s + "or fp8 with weight_block_size (block FP8 as DeepSeek-V3 ships it)";
}

std::optional<Dialect> dialect_from_name(const std::string& name) {
  for (auto d : kAllDialects)
    if (name == dialect_name(d)) return d;
  if (name == "compressed_tensors" || name == "ct") return Dialect::CompressedTensors;
  return std::nullopt;
}

std::string scheme_label(const SchemeSpec& s) { return s.name() + ", " + quant::act_mode_traits(s.act).label; }

Dialect parse_dialect(const std::string& name) {
  auto d = dialect_from_name(name);
  if (!d)
    throw_bad_input(fmt::format("unknown dialect '{}' (expected one of: {})", name, fmt::join(kDialectNames, ", ")));
  return *d;
}

void check_dialect_supports(Dialect d, const SchemeSpec& spec) { dialect_ops(d).check(spec); }

SchemeSpec adapt_scheme_for_dialect(Dialect d, SchemeSpec spec, DType model_dtype) {
  if (!dtype_is_float_source(model_dtype) || model_dtype == DType::F64) model_dtype = DType::BF16;
  return dialect_ops(d).adapt(spec, model_dtype);
}

std::string output_tensor_name(Dialect d, const SchemeSpec& spec, quant::OutRole role,
                               const std::string& module) {
  return module + "." + dialect_ops(d).suffix(spec, role);
}

nlohmann::json scheme_config_json(Dialect d, const SchemeSpec& spec) { return dialect_ops(d).scheme_json(spec); }

nlohmann::json comparable_scheme_config(Dialect d, const nlohmann::json& scheme_json) {
  return dialect_ops(d).comparable(scheme_json);
}

ConfigOutput build_quantization_config(Dialect d, const ConfigInput& in) {
  for (const auto& m : in.linear_modules) {
    if (m.scheme) check_dialect_supports(d, *m.scheme);
  }
  detail::check_engine_groups_consistent(in);
  ConfigOutput out = dialect_ops(d).build(in);
  auto problems = check_config_resolution(d, in, out.quantization_config);
  if (!problems.empty()) {
    // SELQ_DEBUG_CONFIG=1 prints the refused config and every problem (for bug reports).
    if (const char* dbg = std::getenv("SELQ_DEBUG_CONFIG"); dbg && *dbg == '1') {
      std::fprintf(stderr, "%s\n", out.quantization_config.dump(1).c_str());
      for (const auto& p : problems) std::fprintf(stderr, "%s\n", p.c_str());
    }
    std::string msg = fmt::format("the {} config selq built would be misread by an engine ({} problems); first: {}",
                                  dialect_name(d), problems.size(), problems.front());
    throw_unsupported(msg);
  }
  return out;
}

namespace detail {

SchemeSpec f32_scale_adapt(SchemeSpec s, DType) {
  const auto form = quant::scheme_traits(s.kind).f32_scale_form;
  return form ? form(s) : s;
}

void check_kind_row(Dialect d, const SchemeSpec& spec, bool writable, std::string (*problem)(const SchemeSpec&),
                    unsigned inputs, const char* why) {
  if (!writable) unsupported(d, spec, why);
  if (problem)
    if (const std::string p = problem(spec); !p.empty()) unsupported(d, spec, p);
  if ((inputs & quant::act_bit(spec.act)) == 0) unsupported(d, spec, why);
}

nlohmann::json comparable_as_written(const nlohmann::json& scheme_json) { return scheme_json; }

bool config_sets(const nlohmann::json& qc, const char* key) {
  if (!qc.is_object() || !qc.contains(key)) return false;
  const auto& v = qc[key];
  return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_object() || v.is_array()) && v.empty()));
}

std::vector<std::string> config_strings(const nlohmann::json& qc, const char* key) {
  std::vector<std::string> out;
  if (!qc.is_object() || !qc.contains(key) || !qc[key].is_array()) return out;
  for (const auto& e : qc[key])
    if (e.is_string()) out.push_back(e.get<std::string>());
  return out;
}

void unsupported(Dialect d, const SchemeSpec& spec, const std::string& why) {
  throw_unsupported(fmt::format("the {} dialect cannot express {}: {}", dialect_name(d),
                                scheme_label(spec), why));
}

std::vector<std::string> all_module_names(const ConfigInput& in) {
  std::vector<std::string> out;
  out.reserve(in.linear_modules.size());
  for (const auto& m : in.linear_modules) out.push_back(m.module);
  return out;
}

void check_engine_groups_consistent(const ConfigInput& in) {
  std::map<std::string, const ModuleDecision*> by_name;
  for (const auto& m : in.linear_modules) {
    if (!by_name.emplace(m.module, &m).second)
      throw_bad_input(fmt::format("module '{}' is listed twice", m.module));
  }
  for (auto family : {EngineFamily::Vllm, EngineFamily::Sglang}) {
    for (const auto& em : engine_modules(family, all_module_names(in))) {
      const ModuleDecision* first = by_name.at(em.members.front());
      for (const auto& member : em.members) {
        const ModuleDecision* md = by_name.at(member);
        if (md->scheme != first->scheme || md->preexisting != first->preexisting) {
          throw_bad_input(fmt::format(
              "'{}' and '{}' form one engine module '{}' but were given different schemes ({} vs {}); "
              "engines require one scheme per fused layer and per MoE layer",
              first->module, member, em.name, first->scheme ? scheme_label(*first->scheme) : "float",
              md->scheme ? scheme_label(*md->scheme) : "float"));
        }
      }
    }
  }
}

std::vector<SchemeGroup> group_by_scheme(const ConfigInput& in, bool skip_preexisting) {
  std::vector<SchemeGroup> groups;
  for (const auto& m : in.linear_modules) {
    if (!m.scheme || (skip_preexisting && m.preexisting)) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const SchemeGroup& g) { return g.spec == *m.scheme; });
    if (it == groups.end()) {
      groups.push_back({*m.scheme, {m.module}});
    } else {
      it->modules.push_back(m.module);
    }
  }
  return groups;
}

std::vector<std::string> float_modules(const ConfigInput& in) {
  std::vector<std::string> out;
  for (const auto& m : in.linear_modules) {
    if (!m.scheme && !m.preexisting) out.push_back(m.module);  // pre-quantized modules are never float
  }
  return out;
}

std::vector<std::string> compress_expert_names(const std::vector<std::string>& names,
                                               const std::vector<std::string>& all_modules) {
  std::map<std::string, std::set<std::string>> model_children, listed_children;
  for (const auto& m : all_modules) {
    if (auto p = experts_parent(m)) model_children[*p].insert(m);
  }
  for (const auto& m : names) {
    if (auto p = experts_parent(m)) listed_children[*p].insert(m);
  }
  std::set<std::string> complete;
  for (const auto& [parent, children] : listed_children) {
    if (children == model_children[parent]) complete.insert(parent);
  }
  std::vector<std::string> out;
  std::set<std::string> emitted;
  for (const auto& m : names) {
    auto p = experts_parent(m);
    if (!p || !complete.count(*p)) {
      out.push_back(m);
      continue;
    }
    if (!emitted.insert(*p).second) continue;
    std::set<std::string> projs;
    for (const auto& c : model_children[*p]) projs.insert(last_component(c));
    std::string alt;
    for (const auto& proj : projs) {
      if (!alt.empty()) alt += '|';
      alt += regex_escape(proj);
    }
    // Built with += : g++ 12 warns (-Wrestrict, a false positive) on "lit" + std::string&&.
    std::string re = "re:";
    re += regex_escape(*p);
    re += "\\.\\d+\\.(";
    re += alt;
    re += ")$";
    out.push_back(std::move(re));
  }
  return out;
}

}  // namespace detail
}  // namespace selq::exporter
