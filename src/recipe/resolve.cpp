// Recipe + tensor list -> one decision per tensor, then the checks that need
// the whole picture (fused groups, serving constraints, unused patterns).
#include <fmt/format.h>

#include <map>
#include <regex>

#include "core/error.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"
#include "recipe/names.h"
#include "recipe/recipe.h"

namespace selq::recipe {

std::string where_text(const SourceLocation& l) {
  if (l.line <= 0) return l.file;
  return fmt::format("{}:{}:{}", l.file, l.line, l.column);
}

namespace {

using detail::NameInfo;
using quant::ActMode;

struct CompiledPattern {
  enum class Kind { Glob, Regex, Template, Layer } kind{Kind::Glob};
  const Pattern* pattern{nullptr};
  std::regex re;
  const detail::TemplateDef* tdef{nullptr};
  int layer{-1};
  // May quantize an embedding/norm/head/router/conv: a regex, or a glob whose
  // last dotted component is spelled out ("*.mlp.gate", "lm_head").
  bool names_explicitly{false};
  bool hit{false};
  std::size_t protected_skips{0};
  std::string protected_example;
};

CompiledPattern compile(const Pattern& p, const std::string& arch) {
  CompiledPattern c;
  c.pattern = &p;
  const std::string& t = p.text;
  if (t.starts_with("re:")) {
    c.kind = CompiledPattern::Kind::Regex;
    try {
      c.re = std::regex(t.substr(3));
    } catch (const std::regex_error& e) {
      throw_bad_input(fmt::format("invalid regular expression '{}': {}", t.substr(3), e.what()), ErrorWhere(where_text(p.where)));
    }
    c.names_explicitly = true;
  } else if (!t.empty() && t[0] == '@') {
    if (auto n = detail::parse_layer_template(t)) {
      c.kind = CompiledPattern::Kind::Layer;
      c.layer = *n;
    } else {
      c.kind = CompiledPattern::Kind::Template;
      if (const auto* table = detail::arch_templates(arch))
        for (const auto& def : *table)
          if (t.substr(1) == def.name) c.tdef = &def;
      if (!c.tdef)
        throw_bad_input(fmt::format("unknown template '{}' for arch '{}'", t, arch), ErrorWhere(where_text(p.where)));
    }
  } else {
    c.kind = CompiledPattern::Kind::Glob;
    const std::size_t dot = t.rfind('.');
    c.names_explicitly = !detail::has_glob_wildcard(dot == std::string::npos ? t : t.substr(dot + 1));
  }
  return c;
}

bool matches(const CompiledPattern& c, const std::string& module, const std::string& tensor, const NameInfo& info,
             const detail::ArchContext& ctx) {
  switch (c.kind) {
    case CompiledPattern::Kind::Glob:
      return detail::glob_match(c.pattern->text, module) ||
             (tensor != module && detail::glob_match(c.pattern->text, tensor));
    case CompiledPattern::Kind::Regex:
      return std::regex_match(module, c.re) || (tensor != module && std::regex_match(tensor, c.re));
    case CompiledPattern::Kind::Template:
      return c.tdef->matches(info, ctx);
    case CompiledPattern::Kind::Layer:
      return info.layer == c.layer;
  }
  return false;
}

bool is_float_weight_dtype(DType d) { return d == DType::F32 || d == DType::BF16 || d == DType::F16; }

// How a tensor was decided, for messages.
struct Origin {
  enum class Kind { Rule, Exclude, Default, Unmatched, PreQuantized, NotEligible } kind{Kind::NotEligible};
  std::size_t index{0};  // rule or exclude pattern
};

struct RuleStats {
  std::size_t decided{0};
  std::size_t prequantized{0};
  std::string prequantized_example;
};

}  // namespace

std::string describe_scheme(const quant::SchemeSpec& s) {
  std::string out = s.name();  // the one label (manifest, journal, verify)
  if (s.act == ActMode::None) return out + " (weight-only)";
  return out + " + " + quant::act_mode_name(s.act) + " activations";
}

namespace {

// The decision pass and the whole-picture checks over one tensor list.
class Resolver {
 public:
  Resolver(const Recipe& recipe, const std::vector<TensorInfo>& tensors, const nlohmann::json& config)
      : recipe_(recipe), tensors_(tensors), ctx_(detail::make_arch_context(config)) {
    for (const auto& p : recipe.exclude) excludes_.push_back(compile(p, recipe.arch));
    for (const auto& r : recipe.rules) {
      rules_.emplace_back();
      for (const auto& p : r.match) rules_.back().push_back(compile(p, recipe.arch));
    }
    // Names are analysed once; all later passes reuse them.
    owners_.reserve(tensors.size());
    infos_.reserve(tensors.size());
    for (const auto& t : tensors) owners_.push_back(owning_module(t.name));
    for (const auto& o : owners_) infos_.emplace_back(o);
    find_prequantized_modules();
    find_mla_layers();
    res_.decisions.resize(tensors.size());
    origins_.resize(tensors.size());
    stats_.resize(rules_.size());
  }

  Resolution run() {
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      TensorDecision& d = res_.decisions[i];
      d.tensor = tensors_[i].name;
      d.module = is_weight(i) ? owners_[i] : tensors_[i].name;
      if (prequantized_.count(owners_[i]) && (is_weight(i) || !detail::quantized_suffix(d.tensor).empty()))
        decide_prequantized(i);
      else
        decide(i);
    }
    check_fused_groups();
    check_mla_serving();
    warn_unused_patterns();
    return std::move(res_);
  }

 private:
  // Already-quantized modules, their pre-quantized choice made once.
  struct PrequantizedChoice {
    bool decided{false};
    int rule{kRuleUnmatched};
    std::optional<quant::SchemeSpec> scheme;  // nullopt: keep rule, or nothing claims it
  };

  bool is_weight(std::size_t i) const { return tensors_[i].name.ends_with(".weight"); }

  // A module counts as pre-quantized if any of its tensors is a quantization
  // companion or its weight is not stored as floats.
  void find_prequantized_modules() {
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const auto& t = tensors_[i];
      const bool float_weight = is_float_weight_dtype(t.dtype) || t.dtype == DType::F64;
      if (!detail::quantized_suffix(t.name).empty() || (t.name.ends_with(".weight") && !float_weight))
        prequantized_[owners_[i]] = true;
    }
  }

  // The layers with MLA attention (a kv_b_proj), for the templates and the
  // serving check.
  void find_mla_layers() {
    for (const NameInfo& n : infos_) {
      if (n.layer < 0 || n.rest_size() != 2 || n.rest(0) != "self_attn" || n.rest(1) != "kv_b_proj") continue;
      if (ctx_.mla_layers.size() <= static_cast<std::size_t>(n.layer)) ctx_.mla_layers.resize(n.layer + 1, false);
      ctx_.mla_layers[n.layer] = true;
    }
  }

  bool test(CompiledPattern& c, std::size_t i) {
    const bool m = matches(c, owners_[i], tensors_[i].name, infos_[i], ctx_);
    c.hit = c.hit || m;
    return m;
  }

  // The first exclude pattern tensor i matches.
  std::optional<std::size_t> first_exclude(std::size_t i) {
    for (std::size_t e = 0; e < excludes_.size(); ++e)
      if (test(excludes_[e], i)) return e;
    return std::nullopt;
  }

  // The first rule tensor i matches (first match wins); a protected name only
  // by a pattern that names it explicitly (counted as a skip when asked).
  std::optional<std::size_t> first_rule(std::size_t i, bool protected_name, bool count_skips) {
    for (std::size_t r = 0; r < rules_.size(); ++r)
      for (auto& c : rules_[r]) {
        if (!test(c, i)) continue;
        if (protected_name && !c.names_explicitly) {
          if (count_skips && c.protected_skips++ == 0) c.protected_example = tensors_[i].name;
          continue;
        }
        return r;
      }
    return std::nullopt;
  }

  // The module's decision is made once, on the tensor of it seen first, so
  // that its weight and its scales can never be decided apart.
  const PrequantizedChoice& prequantized_choice(std::size_t i) {
    const std::string& owner = owners_[i];
    if (auto done = prequantized_decision_.find(owner); done != prequantized_decision_.end()) return done->second;
    PrequantizedChoice choice;
    bool linear = true;
    const bool protected_name = !detail::protected_kind(infos_[i], linear).empty();
    if (const auto r = first_rule(i, protected_name, false)) {
      choice.decided = true;
      choice.rule = static_cast<int>(*r);
      if (!recipe_.rules[*r].keep) choice.scheme = recipe_.rules[*r].scheme;
    } else if (recipe_.default_scheme && !protected_name) {
      choice.decided = true;
      choice.rule = kRuleDefault;
      choice.scheme = recipe_.default_scheme;
    }
    if (choice.scheme && !recipe_.requantize) {
      auto& st = choice.rule >= 0 ? stats_[static_cast<std::size_t>(choice.rule)] : default_stats_;
      if (st.prequantized++ == 0) st.prequantized_example = owner;
    }
    return prequantized_decision_.emplace(owner, choice).first->second;
  }

  // A tensor of an already-quantized module: passed through, or re-quantized
  // (its weight) and consumed (its scales) with `requantize: true`.
  void decide_prequantized(std::size_t i) {
    TensorDecision& d = res_.decisions[i];
    d.action = Action::PassThrough;
    d.rule_index = kRuleNotEligible;
    d.reason = "pre-quantized";
    origins_[i].kind = Origin::Kind::PreQuantized;
    bool excluded = false;
    for (auto& c : excludes_) excluded = test(c, i) || excluded;
    if (excluded) return;
    const PrequantizedChoice& choice = prequantized_choice(i);
    if (!recipe_.requantize || !choice.scheme) return;
    const bool weight_like = is_weight(i) || d.tensor.ends_with(".weight_packed");
    d.action = weight_like ? Action::Requantize : Action::Consumed;
    d.scheme = choice.scheme;
    d.rule_index = choice.rule;
    d.eligible = weight_like;
    d.reason = "re-quantized";
    if (choice.rule >= 0) {
      if (weight_like) ++stats_[static_cast<std::size_t>(choice.rule)].decided;
      origins_[i] = {Origin::Kind::Rule, static_cast<std::size_t>(choice.rule)};
    } else {
      origins_[i].kind = Origin::Kind::Default;
    }
  }

  // Why a float tensor can never be quantized (not a weight, a non-float or
  // a rank other than 2 or 3), or empty.
  std::string ineligible_reason(std::size_t i) const {
    const TensorInfo& t = tensors_[i];
    if (!is_weight(i)) return "not a weight";
    if (!is_float_weight_dtype(t.dtype)) return fmt::format("{} weight", dtype_name(t.dtype));
    const std::size_t rank = t.shape.size();
    if (rank == 2 || rank == 3) return {};
    bool linear = false;
    const auto kind = detail::protected_kind(infos_[i], linear);
    return kind.empty() ? fmt::format("rank-{} weight", rank) : std::string(kind);
  }

  // A float tensor: excluded, the first rule that matches it, the default, or kept.
  void decide(std::size_t i) {
    TensorDecision& d = res_.decisions[i];
    d.action = Action::Keep;
    d.rule_index = kRuleNotEligible;
    if (std::string why = ineligible_reason(i); !why.empty()) {
      d.reason = std::move(why);
      return;
    }
    bool linear = true;
    const std::string_view pkind = detail::protected_kind(infos_[i], linear);
    d.protected_name = !pkind.empty();
    d.eligible = linear;
    if (const auto e = first_exclude(i)) {
      d.rule_index = kRuleExcluded;
      d.reason = fmt::format("excluded by '{}'", excludes_[*e].pattern->text);
      origins_[i] = {Origin::Kind::Exclude, *e};
    } else if (const auto r = first_rule(i, d.protected_name, true)) {
      ++stats_[*r].decided;
      d.rule_index = static_cast<int>(*r);
      origins_[i] = {Origin::Kind::Rule, *r};
      if (recipe_.rules[*r].keep) {
        d.reason = "kept by rule";
      } else {
        d.action = Action::Quantize;
        d.scheme = recipe_.rules[*r].scheme;
        d.eligible = true;
      }
    } else if (recipe_.default_scheme && !d.protected_name) {
      d.action = Action::Quantize;
      d.scheme = recipe_.default_scheme;
      d.rule_index = kRuleDefault;
      origins_[i].kind = Origin::Kind::Default;
    } else {
      d.rule_index = kRuleUnmatched;
      d.reason = d.protected_name ? std::string(pkind) : "no rule matched";
      origins_[i].kind = Origin::Kind::Unmatched;
    }
  }

  std::string origin_text(std::size_t i) const {
    const Origin& o = origins_[i];
    switch (o.kind) {
      case Origin::Kind::Rule: return fmt::format("the rule at {}", where_text(recipe_.rules[o.index].where));
      case Origin::Kind::Exclude:
        return fmt::format("exclude '{}' at {}", recipe_.exclude[o.index].text,
                           where_text(recipe_.exclude[o.index].where));
      case Origin::Kind::Default: return "the default scheme";
      case Origin::Kind::Unmatched: return "no rule (kept)";
      case Origin::Kind::PreQuantized: return "the source (already quantized)";
      case Origin::Kind::NotEligible: return "eligibility";
    }
    return {};
  }

  static std::string outcome_text(const TensorDecision& d) {
    switch (d.action) {
      case Action::Quantize: return describe_scheme(*d.scheme);
      case Action::Keep: return "unquantized";
      case Action::PassThrough: return "pre-quantized";
      case Action::Requantize:
      case Action::Consumed: return "re-quantized to " + describe_scheme(*d.scheme);
    }
    return {};
  }

  std::string where_of(std::size_t i) const {
    const Origin& o = origins_[i];
    if (o.kind == Origin::Kind::Rule) return where_text(recipe_.rules[o.index].where);
    if (o.kind == Origin::Kind::Exclude) return where_text(recipe_.exclude[o.index].where);
    return recipe_.path;
  }

  // Fused groups: engines load the members into one module with one scheme.
  void check_fused_groups() const {
    std::map<std::string, std::size_t> group_first;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const TensorDecision& d = res_.decisions[i];
      const bool weight_like = d.tensor.ends_with(".weight") || d.tensor.ends_with(".weight_packed");
      if (!weight_like) continue;
      if (d.action != Action::PassThrough && !d.eligible && d.action != Action::Quantize &&
          d.action != Action::Requantize)
        continue;
      const std::string key = detail::fused_group_key(infos_[i]);
      if (key.empty()) continue;
      auto [it, inserted] = group_first.emplace(key, i);
      if (inserted) continue;
      const TensorDecision& f = res_.decisions[it->second];
      // A re-quantized member ends up like a quantized one.
      auto same_kind = [](Action a) { return a == Action::Requantize ? Action::Quantize : a; };
      if (same_kind(f.action) == same_kind(d.action) && f.scheme == d.scheme) continue;
      throw_bad_input(
          fmt::format("fused group '{}': '{}' is {} (by {}) but '{}' is {} (by {}); engines load a fused group "
                      "into one layer, so all its members need the same scheme",
                      key, f.tensor, outcome_text(f), origin_text(it->second), d.tensor, outcome_text(d),
                      origin_text(i)),
          ErrorWhere(where_of(i), d.tensor));
    }
  }

  // With an FP8 KV cache and FP8 prefill queries, MLA's kv_b_proj and o_proj
  // are fed FP8 activations by the attention kernel, so they cannot requantize
  // their own inputs.
  void check_mla_serving() const {
    if (!recipe_.fp8_kv_cache || !recipe_.fp8_prefill_query || !detail::arch_has_mla(recipe_.arch)) return;
    for (std::size_t i = 0; i < tensors_.size(); ++i) {
      const TensorDecision& d = res_.decisions[i];
      if ((d.action != Action::Quantize && d.action != Action::Requantize) || d.scheme->act == ActMode::None) continue;
      const NameInfo& n = infos_[i];
      if (n.rest_size() != 2 || n.rest(0) != "self_attn") continue;
      const bool kv_b = n.rest(1) == "kv_b_proj";
      const bool o = n.rest(1) == "o_proj" && ctx_.is_mla_layer(n.layer);
      if (!kv_b && !o) continue;
      throw_bad_input(
          fmt::format("would be {} by {}, but with serving kv_cache fp8 and prefill_query_quant the MLA "
                      "attention already hands {} FP8 activations; a scheme that quantizes its activations is "
                      "not allowed there (use activations: none, exclude it, or change 'serving')",
                      describe_scheme(*d.scheme), origin_text(i), n.rest(1)),
          ErrorWhere(where_of(i), d.tensor));
    }
  }

  // Patterns that never matched are usually typos or a different naming
  // scheme; look again over every name before saying so (the decision pass
  // stops at the first match).
  void check_unmatched(CompiledPattern& c) const {
    for (std::size_t i = 0; i < tensors_.size() && !c.hit; ++i)
      c.hit = matches(c, owners_[i], tensors_[i].name, infos_[i], ctx_);
  }

  void warn_unused_patterns() {
    auto& w = res_.warnings;
    for (auto& c : excludes_) {
      check_unmatched(c);
      if (!c.hit)
        w.push_back(fmt::format("{}: exclude pattern '{}' matches no tensor or module", where_text(c.pattern->where),
                                c.pattern->text));
    }
    for (std::size_t r = 0; r < rules_.size(); ++r) warn_rule(r);
    if (default_stats_.prequantized)
      w.push_back(fmt::format(
          "{}: default asks for {} but {} module(s) such as '{}' are already quantized in the source; they pass "
          "through unchanged (set `requantize: true` in the recipe to dequantize and quantize them again)",
          recipe_.path, describe_scheme(*recipe_.default_scheme), default_stats_.prequantized,
          default_stats_.prequantized_example));
  }

  // A rule's patterns that match nothing or only protected names, and a rule
  // that decides nothing.
  void warn_rule(std::size_t r) {
    auto& w = res_.warnings;
    bool any_hit = false;
    for (auto& c : rules_[r]) {
      check_unmatched(c);
      any_hit = any_hit || c.hit;
      if (!c.hit)
        w.push_back(
            fmt::format("{}: pattern '{}' matches no tensor or module", where_text(c.pattern->where), c.pattern->text));
      if (c.protected_skips)
        w.push_back(fmt::format(
            "{}: pattern '{}' matches {} protected tensor(s) such as '{}' (embedding, norm, head, router or conv) "
            "that only a spelled-out name or a re: pattern may quantize; left unquantized",
            where_text(c.pattern->where), c.pattern->text, c.protected_skips, c.protected_example));
    }
    if (stats_[r].prequantized)
      w.push_back(fmt::format(
          "{}: rule asks for {} but matches {} module(s) such as '{}' that are already quantized in the source; "
          "they pass through unchanged (set `requantize: true` in the recipe to dequantize and quantize them again)",
          where_text(recipe_.rules[r].where), describe_scheme(recipe_.rules[r].scheme), stats_[r].prequantized,
          stats_[r].prequantized_example));
    else if (any_hit && stats_[r].decided == 0)
      w.push_back(fmt::format(
          "{}: rule decides no tensor: everything it matches is excluded, protected, or taken by an earlier rule",
          where_text(recipe_.rules[r].where)));
  }

  const Recipe& recipe_;
  const std::vector<TensorInfo>& tensors_;
  detail::ArchContext ctx_;
  std::vector<CompiledPattern> excludes_;
  std::vector<std::vector<CompiledPattern>> rules_;
  std::vector<std::string> owners_;
  std::vector<NameInfo> infos_;
  std::map<std::string_view, bool> prequantized_;
  std::map<std::string, PrequantizedChoice> prequantized_decision_;
  Resolution res_;
  std::vector<Origin> origins_;
  std::vector<RuleStats> stats_;
  RuleStats default_stats_;  // pre-quantized modules only the default claims
};

}  // namespace

Resolution resolve_recipe(const Recipe& recipe, const std::vector<TensorInfo>& tensors,
                          const nlohmann::json& config) {
  return Resolver(recipe, tensors, config).run();
}

}  // namespace selq::recipe
