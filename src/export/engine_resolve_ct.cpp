// How vLLM and SGLang find a module's compressed-tensors scheme (docs/ENGINE_RULES.md
// §1.2): the ignore list, then the first target in target_scheme_map order
// (exact name, `re:`, then class name), fused shards all-or-none, MoE layers
// by expert 0's projections. SGLang also ignores by lowercase substring and
// raises where no target matches; vLLM loads int weight-only only from
// pack-quantized. Keep the steps literal, quirks included: catching them is
// the point.
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "export/engine_resolve_internal.h"

namespace selq::exporter::detail {
namespace {

using nlohmann::json;
using Kind = EngineModule::Kind;

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string expert_index(const std::string& member) {
  std::string p = parent_of(member);
  return last_component(p);
}

struct CtIgnore {
  std::vector<std::string> list;  // literal scan when a regex does not compile
  bool literal{false};
  NameSet exact;
  std::vector<std::string> res;   // patterns without "re:"
  NeedleSet lowered;              // SGLang: lower(pattern) in lower(name)
};

struct CtTargets {
  std::vector<std::pair<std::string, json>> list;  // target_scheme_map, in order
  NameMap<std::size_t> exact;                      // non-re target -> position
  std::vector<std::pair<std::size_t, std::string>> res;  // position, pattern without "re:"
  std::map<std::string, std::optional<std::size_t>> by_class;
};

bool ignored_by(const CtIgnore& ix, const std::string& name, bool sglang) {
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
std::optional<std::size_t> first_target(const CtTargets& ix, const std::string& name) {
  std::size_t best = std::string::npos;
  if (auto it = ix.exact.find(name); it != ix.exact.end()) best = it->second;
  for (const auto& [i, re] : ix.res) {
    if (i >= best) break;
    if (py_re_match(re, name)) return i;
  }
  if (best == std::string::npos) return std::nullopt;
  return best;
}

class CtRules final : public EngineRules {
 public:
  using EngineRules::EngineRules;

  std::optional<json> resolve(const EngineModule& em) override {
    std::optional<json> r = em.kind == Kind::Experts ? experts(em)
                                                     : linear(em.name, em.kind, em.members, class_name_of(em));
    if (r && engine_ == Engine::VllmCompressedTensors) require_vllm_scheme(em.name, *r);
    return r;
  }

 private:
  std::optional<CtIgnore> ignore_idx_;
  std::optional<CtTargets> targets_idx_;

  const CtIgnore& ignore() {
    if (ignore_idx_) return *ignore_idx_;
    CtIgnore ix;
    ix.list = string_list(qc_.value("ignore", json::array()));
    for (const auto& pat : ix.list) {
      if (pat.starts_with("re:")) {
        ix.res.push_back(pat.substr(3));
        ix.literal |= !regex_compiles(ix.res.back());
      } else {
        ix.exact.insert(pat);
        ix.lowered.add(lower(pat));
      }
    }
    return ignore_idx_.emplace(std::move(ix));
  }

  CtTargets& targets() {
    if (targets_idx_) return *targets_idx_;
    // 2. target_scheme_map in group order; a later group takes over a target.
    CtTargets ix;
    NameMap<std::size_t> pos;
    std::string top_format = qc_.value("format", "");
    const json groups = qc_.value("config_groups", json::object());
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
    return targets_idx_.emplace(std::move(ix));
  }

  std::optional<json> linear(const std::string& prefix, Kind kind, const std::vector<std::string>& shards,
                             const std::string& cls) {
    bool sglang = engine_ == Engine::SglangCompressedTensors;
    const CtIgnore& ign = ignore();
    // 1. should_ignore_layer
    bool ignored = ignored_by(ign, prefix, sglang);
    if (!ignored && kind == Kind::Fused) {
      std::size_t n = 0;
      for (const auto& s : shards) n += ignored_by(ign, s, sglang) ? 1 : 0;
      if (n != 0 && n != shards.size())
        fail(fmt::format("shards of {} are partly ignored; vLLM requires all to use the same scheme", prefix));
      ignored = n == shards.size();
    }
    if (ignored) return std::nullopt;

    CtTargets& ix = targets();
    if (auto i = first_target(ix, prefix)) return ix.list[*i].second;
    if (kind == Kind::Fused) {
      std::optional<json> first;
      bool all_matched = true;
      for (const auto& shard : shards) {
        auto i = first_target(ix, shard);
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
  // "INT weight-only").
  void require_vllm_scheme(const std::string& prefix, const json& scheme) const {
    const auto w = scheme.find("weights");
    if (w == scheme.end() || !w->is_object() || w->value("type", json()) != json("int")) return;
    const auto in = scheme.find("input_activations");
    if (in != scheme.end() && !in->is_null()) return;
    json format = scheme.value("format", json());
    if (!format.is_string()) format = qc_.value("format", json());
    if (format != json("pack-quantized"))
      fail(fmt::format("{}: int{} weight-only is loaded only from format 'pack-quantized', not {}", prefix,
                       w->value("num_bits", json()).dump(), format.dump()));
  }

  // §1.2 routed experts: only expert 0's projections are probed, and they must agree.
  std::optional<json> experts(const EngineModule& em) {
    std::vector<std::string> probes;
    for (const auto& m : em.members) {
      if (expert_index(m) == "0") probes.push_back(m);
    }
    if (probes.empty()) fail(fmt::format("{} has no expert 0 to probe", em.name));
    std::optional<json> first;
    for (std::size_t i = 0; i < probes.size(); ++i) {
      auto r = linear(probes[i], Kind::Linear, {probes[i]}, "RoutedExperts");
      if (i == 0) first = r;
      else if (r != first) fail(fmt::format("{} projections of expert 0 resolve to different schemes", em.name));
    }
    return first;
  }
};

}  // namespace

std::unique_ptr<EngineRules> ct_rules(Engine e, const json& qc) { return std::make_unique<CtRules>(e, qc); }

}  // namespace selq::exporter::detail
