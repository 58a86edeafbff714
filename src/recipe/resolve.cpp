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

Resolution resolve_recipe(const Recipe& recipe, const std::vector<TensorInfo>& tensors,
                          const nlohmann::json& config) {
  detail::ArchContext ctx = detail::make_arch_context(config);

  std::vector<CompiledPattern> excludes;
  for (const auto& p : recipe.exclude) excludes.push_back(compile(p, recipe.arch));
  std::vector<std::vector<CompiledPattern>> rules;
  for (const auto& r : recipe.rules) {
    rules.emplace_back();
    for (const auto& p : r.match) rules.back().push_back(compile(p, recipe.arch));
  }

  // Names are analysed once; all later passes reuse them.
  std::vector<std::string> owners;
  std::vector<NameInfo> infos;
  owners.reserve(tensors.size());
  infos.reserve(tensors.size());
  for (const auto& t : tensors) owners.push_back(owning_module(t.name));
  for (const auto& o : owners) infos.emplace_back(o);

  // A module counts as pre-quantized if any of its tensors is a quantization
  // companion or its weight is not stored as floats.
  std::map<std::string_view, bool> prequantized;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    const bool float_weight = is_float_weight_dtype(t.dtype) || t.dtype == DType::F64;
    if (!detail::quantized_suffix(t.name).empty() || (t.name.ends_with(".weight") && !float_weight))
      prequantized[owners[i]] = true;
    const NameInfo& n = infos[i];
    if (n.layer >= 0 && n.rest_size() == 2 && n.rest(0) == "self_attn" && n.rest(1) == "kv_b_proj") {
      if (ctx.mla_layers.size() <= static_cast<std::size_t>(n.layer)) ctx.mla_layers.resize(n.layer + 1, false);
      ctx.mla_layers[n.layer] = true;
    }
  }

  // Pre-quantized modules: the rule (or default) that claims each one.
  struct PrequantizedChoice {
    bool decided{false};
    int rule{kRuleUnmatched};
    std::optional<quant::SchemeSpec> scheme;  // nullopt: keep rule, or nothing claims it
  };
  std::map<std::string, PrequantizedChoice> prequantized_decision;

  Resolution res;
  res.decisions.resize(tensors.size());
  std::vector<Origin> origins(tensors.size());
  std::vector<RuleStats> stats(rules.size());
  RuleStats default_stats;  // pre-quantized modules only the default claims

  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    const std::string& owner = owners[i];
    const NameInfo& info = infos[i];
    TensorDecision& d = res.decisions[i];
    d.tensor = t.name;
    const bool is_weight = t.name.ends_with(".weight");
    d.module = is_weight ? owner : t.name;

    auto test = [&](CompiledPattern& c) {
      const bool m = matches(c, owner, t.name, info, ctx);
      c.hit = c.hit || m;
      return m;
    };

    if (prequantized.count(owner) && (is_weight || !detail::quantized_suffix(t.name).empty())) {
      d.action = Action::PassThrough;
      d.rule_index = kRuleNotEligible;
      d.reason = "pre-quantized";
      origins[i].kind = Origin::Kind::PreQuantized;
      bool excluded = false;
      for (auto& c : excludes) excluded = test(c) || excluded;
      if (excluded) continue;
      // The module's decision is made once, on the tensor of it seen first,
      // so that its weight and its scales can never be decided apart.
      auto done = prequantized_decision.find(owner);
      if (done == prequantized_decision.end()) {
        PrequantizedChoice choice;
        bool linear = true;
        const bool protected_name = !detail::protected_kind(info, linear).empty();
        for (std::size_t r = 0; r < rules.size() && !choice.decided; ++r) {
          bool hit = false;
          for (auto& c : rules[r])
            if (test(c) && (!protected_name || c.names_explicitly)) hit = true;
          if (!hit) continue;
          choice.decided = true;
          choice.rule = static_cast<int>(r);
          if (!recipe.rules[r].keep) choice.scheme = recipe.rules[r].scheme;
        }
        if (!choice.decided && recipe.default_scheme && !protected_name) {
          choice.decided = true;
          choice.rule = kRuleDefault;
          choice.scheme = recipe.default_scheme;
        }
        done = prequantized_decision.emplace(owner, choice).first;
        if (choice.scheme && !recipe.requantize) {
          auto& st = choice.rule >= 0 ? stats[static_cast<std::size_t>(choice.rule)] : default_stats;
          if (st.prequantized++ == 0) st.prequantized_example = owner;
        }
      }
      const PrequantizedChoice& choice = done->second;
      if (recipe.requantize && choice.scheme) {
        const bool weight_like = is_weight || t.name.ends_with(".weight_packed");
        d.action = weight_like ? Action::Requantize : Action::Consumed;
        d.scheme = choice.scheme;
        d.rule_index = choice.rule;
        d.eligible = weight_like;
        d.reason = "re-quantized";
        if (choice.rule >= 0) {
          if (weight_like) ++stats[static_cast<std::size_t>(choice.rule)].decided;
          origins[i] = {Origin::Kind::Rule, static_cast<std::size_t>(choice.rule)};
        } else {
          origins[i].kind = Origin::Kind::Default;
        }
      }
      continue;
    }

    d.action = Action::Keep;
    d.rule_index = kRuleNotEligible;
    const std::size_t rank = t.shape.size();
    if (!is_weight) {
      d.reason = "not a weight";
      continue;
    }
    if (!is_float_weight_dtype(t.dtype)) {
      d.reason = fmt::format("{} weight", dtype_name(t.dtype));
      continue;
    }
    if (rank != 2 && rank != 3) {
      bool linear = false;
      const auto kind = detail::protected_kind(info, linear);
      d.reason = kind.empty() ? fmt::format("rank-{} weight", rank) : std::string(kind);
      continue;
    }

    bool linear = true;
    const std::string_view pkind = detail::protected_kind(info, linear);
    d.protected_name = !pkind.empty();
    d.eligible = linear;

    bool decided = false;
    for (std::size_t e = 0; e < excludes.size() && !decided; ++e) {
      if (!test(excludes[e])) continue;
      decided = true;
      d.rule_index = kRuleExcluded;
      d.reason = fmt::format("excluded by '{}'", excludes[e].pattern->text);
      origins[i] = {Origin::Kind::Exclude, e};
    }
    for (std::size_t r = 0; r < rules.size() && !decided; ++r) {
      for (auto& c : rules[r]) {
        if (!test(c)) continue;
        if (d.protected_name && !c.names_explicitly) {
          if (c.protected_skips++ == 0) c.protected_example = t.name;
          continue;
        }
        decided = true;
        break;
      }
      if (!decided) continue;
      ++stats[r].decided;
      d.rule_index = static_cast<int>(r);
      origins[i] = {Origin::Kind::Rule, r};
      if (recipe.rules[r].keep) {
        d.reason = "kept by rule";
      } else {
        d.action = Action::Quantize;
        d.scheme = recipe.rules[r].scheme;
        d.eligible = true;
      }
    }
    if (!decided) {
      if (recipe.default_scheme && !d.protected_name) {
        d.action = Action::Quantize;
        d.scheme = recipe.default_scheme;
        d.rule_index = kRuleDefault;
        origins[i].kind = Origin::Kind::Default;
      } else {
        d.rule_index = kRuleUnmatched;
        d.reason = d.protected_name ? std::string(pkind) : "no rule matched";
        origins[i].kind = Origin::Kind::Unmatched;
      }
    }
  }

  auto origin_text = [&](std::size_t i) -> std::string {
    const Origin& o = origins[i];
    switch (o.kind) {
      case Origin::Kind::Rule:
        return fmt::format("the rule at {}", where_text(recipe.rules[o.index].where));
      case Origin::Kind::Exclude:
        return fmt::format("exclude '{}' at {}", recipe.exclude[o.index].text, where_text(recipe.exclude[o.index].where));
      case Origin::Kind::Default: return "the default scheme";
      case Origin::Kind::Unmatched: return "no rule (kept)";
      case Origin::Kind::PreQuantized: return "the source (already quantized)";
      case Origin::Kind::NotEligible: return "eligibility";
    }
    return {};
  };
  auto outcome_text = [&](const TensorDecision& d) -> std::string {
    switch (d.action) {
      case Action::Quantize: return describe_scheme(*d.scheme);
      case Action::Keep: return "unquantized";
      case Action::PassThrough: return "pre-quantized";
      case Action::Requantize:
      case Action::Consumed: return "re-quantized to " + describe_scheme(*d.scheme);
    }
    return {};
  };
  auto where_of = [&](std::size_t i) -> std::string {
    const Origin& o = origins[i];
    if (o.kind == Origin::Kind::Rule) return where_text(recipe.rules[o.index].where);
    if (o.kind == Origin::Kind::Exclude) return where_text(recipe.exclude[o.index].where);
    return recipe.path;
  };

  // Fused groups: engines load the members into one module with one scheme.
  std::map<std::string, std::size_t> group_first;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorDecision& d = res.decisions[i];
    const bool weight_like = d.tensor.ends_with(".weight") || d.tensor.ends_with(".weight_packed");
    if (!weight_like) continue;
    if (d.action != Action::PassThrough && !d.eligible && d.action != Action::Quantize &&
        d.action != Action::Requantize)
      continue;
    const std::string key = detail::fused_group_key(infos[i]);
    if (key.empty()) continue;
    auto [it, inserted] = group_first.emplace(key, i);
    if (inserted) continue;
    const TensorDecision& f = res.decisions[it->second];
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

  // With an FP8 KV cache and FP8 prefill queries, MLA's kv_b_proj and o_proj
  // are fed FP8 activations by the attention kernel, so they cannot requantize
  // their own inputs.
  if (recipe.fp8_kv_cache && recipe.fp8_prefill_query && detail::arch_has_mla(recipe.arch)) {
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      const TensorDecision& d = res.decisions[i];
      if ((d.action != Action::Quantize && d.action != Action::Requantize) || d.scheme->act == ActMode::None) continue;
      const NameInfo& n = infos[i];
      if (n.rest_size() != 2 || n.rest(0) != "self_attn") continue;
      const bool kv_b = n.rest(1) == "kv_b_proj";
      const bool o = n.rest(1) == "o_proj" && ctx.is_mla_layer(n.layer);
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
  auto check_unmatched = [&](CompiledPattern& c) {
    for (std::size_t i = 0; i < tensors.size() && !c.hit; ++i)
      c.hit = matches(c, owners[i], tensors[i].name, infos[i], ctx);
  };
  for (auto& c : excludes) {
    check_unmatched(c);
    if (!c.hit)
      res.warnings.push_back(
          fmt::format("{}: exclude pattern '{}' matches no tensor or module", where_text(c.pattern->where), c.pattern->text));
  }
  for (std::size_t r = 0; r < rules.size(); ++r) {
    bool any_hit = false;
    for (auto& c : rules[r]) {
      check_unmatched(c);
      any_hit = any_hit || c.hit;
      if (!c.hit)
        res.warnings.push_back(
            fmt::format("{}: pattern '{}' matches no tensor or module", where_text(c.pattern->where), c.pattern->text));
      if (c.protected_skips)
        res.warnings.push_back(fmt::format(
            "{}: pattern '{}' matches {} protected tensor(s) such as '{}' (embedding, norm, head, router or conv) "
            "that only a spelled-out name or a re: pattern may quantize; left unquantized",
            where_text(c.pattern->where), c.pattern->text, c.protected_skips, c.protected_example));
    }
    if (stats[r].prequantized)
      res.warnings.push_back(fmt::format(
          "{}: rule asks for {} but matches {} module(s) such as '{}' that are already quantized in the source; "
          "they pass through unchanged (set `requantize: true` in the recipe to dequantize and quantize them again)",
          where_text(recipe.rules[r].where),
          describe_scheme(recipe.rules[r].scheme),
          stats[r].prequantized, stats[r].prequantized_example));
    else if (any_hit && stats[r].decided == 0)
      res.warnings.push_back(fmt::format(
          "{}: rule decides no tensor: everything it matches is excluded, protected, or taken by an earlier rule",
          where_text(recipe.rules[r].where)));
  }
  if (default_stats.prequantized)
    res.warnings.push_back(fmt::format(
        "{}: default asks for {} but {} module(s) such as '{}' are already quantized in the source; they pass "
        "through unchanged (set `requantize: true` in the recipe to dequantize and quantize them again)",
        recipe.path, describe_scheme(*recipe.default_scheme), default_stats.prequantized,
        default_stats.prequantized_example));
  return res;
}

}  // namespace selq::recipe
