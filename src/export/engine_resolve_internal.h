#pragma once
// What engine_resolve.cpp shares with each dialect's engine rules
// (engine_resolve_{ct,quark,modelopt}.cpp): the interface they implement,
// the matching helpers and the indexed name sets. Not part of the public
// interface.
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/engine_resolve.h"
#include "export/module_names.h"

namespace selq::exporter::detail {

// One engine's lookup over one config, following the numbered steps of
// docs/ENGINE_RULES.md (§1-§4) for that engine. EngineResolver maps names to engine modules,
// leaves out the modules no engine quantizes and caches the answers.
class EngineRules {
 public:
  // `qc` is the EngineResolver's own copy, which outlives its rules.
  EngineRules(Engine e, const nlohmann::json& qc) : engine_(e), qc_(qc) {}
  virtual ~EngineRules() = default;
  EngineRules(const EngineRules&) = delete;
  EngineRules& operator=(const EngineRules&) = delete;

  // The scheme the engine applies to `em`, in the dialect's own form, or
  // nullopt when it builds `em` unquantized.
  virtual std::optional<nlohmann::json> resolve(const EngineModule& em) = 0;

 protected:
  // BadInput "<engine> would raise: <what>".
  [[noreturn]] void fail(const std::string& what) const;

  const Engine engine_;
  const nlohmann::json& qc_;
};

// Each defined in its dialect's engine_resolve_<dialect>.cpp.
std::unique_ptr<EngineRules> ct_rules(Engine e, const nlohmann::json& qc);
std::unique_ptr<EngineRules> quark_rules(Engine e, const nlohmann::json& qc);
std::unique_ptr<EngineRules> modelopt_rules(Engine e, const nlohmann::json& qc);

inline bool contains(const std::string& hay, const std::string& needle) {
  return !needle.empty() && hay.find(needle) != std::string::npos;
}

// `re:` or exact, as vLLM/SGLang use for CT targets and ignore, Quark exclude.
inline bool exact_or_re_match(const std::string& name, const std::string& pattern) {
  if (pattern.starts_with("re:")) return py_re_match(pattern.substr(3), name);
  return pattern == name;
}

// The strings of `j` when it is an array; other elements are skipped.
std::vector<std::string> string_list(const nlohmann::json& j);

// The vLLM class an engine module is built as ("QKVParallelLinear", ...),
// which CT class-name targets and Quark's head rule look at.
std::string class_name_of(const EngineModule& em);

bool regex_compiles(const std::string& pattern);

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
bool has_name_or_dotted_prefix(const NameSet& set, std::string_view name);

// Inserts `e` and every prefix of it that ends before a '.', so that "some
// entry equals n or starts with n + '.'" is one lookup of n.
void insert_with_dotted_prefixes(NameSet& set, const std::string& e);

}  // namespace selq::exporter::detail
