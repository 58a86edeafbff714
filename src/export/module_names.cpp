#include "export/module_names.h"

#include <fnmatch.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <regex>
#include <set>
#include <unordered_map>

#include "core/expert_name.h"

namespace selq::exporter {

const std::vector<FusedRule>& packed_modules(EngineFamily family) {
  static const std::vector<FusedRule> sglang = [] {
    auto rules = recipe::fused_linear_rules();
    for (auto& r : rules)
      if (r.fused == "fused_qkv_a_proj") r.fused = "fused_qkv_a_proj_with_mqa";
    return rules;
  }();
  return family == EngineFamily::Sglang ? sglang : recipe::fused_linear_rules();
}

std::string last_component(const std::string& name) {
  auto p = name.rfind('.');
  return p == std::string::npos ? name : name.substr(p + 1);
}

std::string parent_of(const std::string& name) {
  auto p = name.rfind('.');
  return p == std::string::npos ? std::string() : name.substr(0, p);
}

std::optional<std::string> experts_parent(const std::string& module) {
  // <parent>.experts.<digits>.<proj>, the projection one component
  const auto e = parse_routed_expert(module);
  if (!e || e->rest.empty() || e->rest.find('.') != std::string_view::npos) return std::nullopt;
  return std::string(e->experts);
}

bool engine_never_quantizes(const std::string& m) {
  std::string last = last_component(m);
  std::string parent_last = last_component(parent_of(m));
  if (last == "gate" && parent_last == "mlp") return true;  // MoE router (GateLinear)
  if (parent_last == "indexer" && (last == "wk" || last == "weights_proj" || last == "wk_weights_proj"))
    return true;
  return last == "eh_proj";
}

std::vector<EngineModule> engine_modules(EngineFamily family,
                                         const std::vector<std::string>& checkpoint_modules) {
  std::vector<EngineModule> out;
  std::map<std::string, std::size_t> experts_at;
  std::map<std::string, bool> present;
  for (const auto& m : checkpoint_modules) present[m] = true;
  std::map<std::string, bool> consumed;

  for (const auto& m : checkpoint_modules) {
    if (consumed.count(m)) continue;
    if (auto p = experts_parent(m)) {
      auto it = experts_at.find(*p);
      if (it == experts_at.end()) {
        experts_at[*p] = out.size();
        out.push_back({*p, EngineModule::Kind::Experts, {m}});
      } else {
        out[it->second].members.push_back(m);
      }
      consumed[m] = true;
      continue;
    }
    std::string parent = parent_of(m);
    std::string last = last_component(m);
    bool fused = false;
    for (const auto& rule : packed_modules(family)) {
      if (std::find(rule.shards.begin(), rule.shards.end(), last) == rule.shards.end()) continue;
      std::vector<std::string> shards;
      bool all = true;
      for (const auto& s : rule.shards) {
        std::string full = parent.empty() ? s : parent + "." + s;
        if (!present.count(full)) { all = false; break; }
        shards.push_back(full);
      }
      if (!all) break;
      for (const auto& s : shards) consumed[s] = true;
      out.push_back({parent.empty() ? rule.fused : parent + "." + rule.fused, EngineModule::Kind::Fused,
                     shards});
      fused = true;
      break;
    }
    if (!fused) {
      consumed[m] = true;
      out.push_back({m, EngineModule::Kind::Linear, {m}});
    }
  }
  for (auto& em : out) {
    if (em.kind == EngineModule::Kind::Experts) std::sort(em.members.begin(), em.members.end());
  }
  return out;
}

// Resolving a 60k-module MoE tests the same few patterns hundreds of
// thousands of times; compiling a std::regex costs far more than matching.
static const std::regex& compiled(const std::string& pattern) {
  thread_local std::unordered_map<std::string, std::regex> cache;
  auto it = cache.find(pattern);
  if (it == cache.end()) it = cache.emplace(pattern, std::regex(pattern, std::regex::ECMAScript)).first;
  return it->second;
}

bool py_re_match(const std::string& pattern, const std::string& s) {
  return std::regex_search(s, compiled(pattern), std::regex_constants::match_continuous);
}

bool py_re_search(const std::string& pattern, const std::string& s) {
  return std::regex_search(s, compiled(pattern));
}

bool py_fnmatch(const std::string& name, const std::string& pattern) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(".^$|()[]{}*+?\\").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

std::vector<std::string> unstored_head_modules(const std::vector<std::string>& tensor_names) {
  std::set<std::string> names(tensor_names.begin(), tensor_names.end());
  auto ends_with_embedding = [](const std::string& n) { return n.ends_with("embed_tokens.weight"); };
  std::vector<std::string> out;
  const bool has_embedding = std::any_of(names.begin(), names.end(), ends_with_embedding);
  const bool has_head = std::any_of(names.begin(), names.end(),
                                    [](const std::string& n) { return n == "lm_head.weight" || n.ends_with(".lm_head.weight"); });
  if (has_embedding && !has_head) out.push_back("lm_head");
  for (const auto& n : names) {
    if (!n.ends_with(".eh_proj.weight")) continue;
    const std::string layer = n.substr(0, n.size() - std::string_view(".eh_proj.weight").size());
    if (!names.count(layer + ".shared_head.head.weight")) out.push_back(layer + ".shared_head.head");
  }
  return out;
}

}  // namespace selq::exporter
