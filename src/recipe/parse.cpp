// YAML -> Recipe. Every error names file:line:column of the offending node
// so that a user can jump straight to it.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <regex>
#include <set>
#include <span>
#include <sstream>

#include "core/error.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"
#include "quant/rounding_traits.h"
#include "recipe/names.h"
#include "recipe/recipe.h"
#include "recipe/scheme_option_values.h"
#include "recipe/shipped.h"

namespace selq::recipe {
namespace {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

struct Ctx {
  const std::string& path;
};

SourceLocation loc(const Ctx& c, const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  if (m.line < 0) return {c.path, 0, 0};
  return {c.path, m.line + 1, m.column + 1};
}

[[noreturn]] void fail(const Ctx& c, const YAML::Node& n, const std::string& msg) {
  throw_bad_input(msg, ErrorWhere(where_text(loc(c, n))));
}

std::string scalar(const Ctx& c, const YAML::Node& n, const std::string& what) {
  if (!n.IsScalar()) fail(c, n, fmt::format("{} must be a string", what));
  return n.Scalar();
}

bool boolean(const Ctx& c, const YAML::Node& n, const std::string& what) {
  bool v = false;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) fail(c, n, fmt::format("{} must be true or false", what));
  return v;
}

int integer(const Ctx& c, const YAML::Node& n, const std::string& what) {
  int v = 0;
  if (!n.IsScalar() || !YAML::convert<int>::decode(n, v)) fail(c, n, fmt::format("{} must be an integer", what));
  return v;
}

// Iterates a mapping, rejecting duplicate and unknown keys at the key's position.
template <typename F>
void for_each_key(const Ctx& c, const YAML::Node& map, const std::string& what,
                  std::initializer_list<const char*> allowed, F&& f) {
  if (!map.IsMap()) fail(c, map, fmt::format("{} must be a mapping", what));
  std::set<std::string> seen;
  for (auto it = map.begin(); it != map.end(); ++it) {
    const std::string key = scalar(c, it->first, "a key");
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    if (!ok) {
      std::string list;
      for (const char* a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
      fail(c, it->first, fmt::format("unknown key '{}' in {} (allowed: {})", key, what, list));
    }
    if (!seen.insert(key).second) fail(c, it->first, fmt::format("duplicate key '{}' in {}", key, what));
    f(key, it->first, it->second);
  }
}

template <typename T>
T lookup(const Ctx& c, const YAML::Node& n, const std::string& what, std::span<const std::pair<const char*, T>> table) {
  const std::string v = scalar(c, n, what);
  for (const auto& [name, value] : table)
    if (v == name) return value;
  std::string list;
  for (const auto& [name, value] : table) list += (list.empty() ? "" : ", ") + std::string(name);
  fail(c, n, fmt::format("unknown {} '{}' (expected one of: {})", what, v, list));
}

template <typename T>
T lookup(const Ctx& c, const YAML::Node& n, const std::string& what,
         std::initializer_list<std::pair<const char*, T>> table) {
  return lookup(c, n, what, std::span(table.begin(), table.size()));
}

ActMode act_mode(const Ctx& c, const YAML::Node& n) {
  const std::string v = scalar(c, n, "activations");
  std::vector<std::string> names;
  for (const quant::ActModeTraits& a : quant::all_act_mode_traits()) {
    if (v == a.name) return a.mode;
    names.emplace_back(a.name);
  }
  fail(c, n, fmt::format("unknown activations '{}' (expected one of: {})", v, fmt::join(names, ", ")));
}

quant::Rounding rounding(const Ctx& c, const YAML::Node& n) {
  const std::string v = scalar(c, n, "rounding");
  try {
    return quant::parse_rounding(v, "rounding");
  } catch (const Error& e) {
    fail(c, n, e.message());
  }
}

// `options` is a null node when absent; `rounding` is the recipe's (its
// top-level `rounding:`), which a rule's own option overrides.
SchemeSpec parse_scheme(const Ctx& c, const YAML::Node& name_node, const YAML::Node& options,
                        quant::Rounding recipe_rounding) {
  SchemeSpec s;
  const std::string name = scalar(c, name_node, "scheme");
  if (!quant::spec_from_recipe_name(name, s))
    fail(c, name_node,
         fmt::format("unknown scheme '{}' (expected one of: {}, keep)", name,
                     fmt::join(quant::recipe_scheme_names(), ", ")));
  s.rounding.value = recipe_rounding;
  if (!options || options.IsNull()) return s;

  // Whether the scheme (as the options so far made it) takes this option.
  auto only_for = [&](const YAML::Node& key, unsigned option) {
    if (!(quant::scheme_traits(s.kind).options & option))
      fail(c, key, fmt::format("option '{}' does not apply to scheme '{}' (only {})", key.Scalar(), name,
                               quant::recipe_names_taking(option)));
  };
  for_each_key(c, options, "scheme options",
               {"activations", "scale_rule", "scale_dtype", "scale_keepdim", "block_size", "group_size",
                "symmetric", "pack_int32", "rounding"},
               [&](const std::string& key, const YAML::Node& k, const YAML::Node& v) {
                 if (key == "rounding") {
                   s.rounding.value = rounding(c, v);  // any scheme (fp8-tensor: its one scale is nearest's)
                 } else if (key == "activations") {
                   s.act = act_mode(c, v);
                   if (const std::string why = quant::act_mismatch(s); !why.empty()) fail(c, v, why);
                 } else if (key == "scale_rule") {
                   only_for(k, quant::kOptScaleRule);
                   s.scale_rule = lookup<ScaleRule>(c, v, "scale_rule", detail::kScaleRuleValues);
                 } else if (key == "scale_dtype") {
                   only_for(k, quant::kOptScaleDtype);
                   s.scale_dtype = lookup<DType>(c, v, "scale_dtype", detail::kScaleDtypeValues);
                 } else if (key == "scale_keepdim") {
                   only_for(k, quant::kOptScaleKeepdim);
                   s.scale_keepdim = boolean(c, v, "scale_keepdim");
                 } else if (key == "block_size") {
                   only_for(k, quant::kOptBlockSize);
                   if (v.IsSequence()) {
                     if (v.size() != 2) fail(c, v, "block_size must be N or [rows, cols]");
                     s.block_rows = integer(c, v[0], "block_size");
                     s.block_cols = integer(c, v[1], "block_size");
                   } else {
                     s.block_rows = s.block_cols = integer(c, v, "block_size");
                   }
                   if (s.block_rows <= 0 || s.block_cols <= 0) fail(c, v, "block_size must be positive");
                 } else if (key == "group_size") {
                   only_for(k, quant::kOptGroupSize);
                   const int g = integer(c, v, "group_size");
                   if (g == -1) {
                     s.kind = SchemeKind::IntChannel;
                     s.group_size = 0;
                   } else if (g > 0) {
                     s.kind = SchemeKind::IntGroup;
                     s.group_size = g;
                   } else {
                     fail(c, v, "group_size must be positive, or -1 for one scale per output channel");
                   }
                 } else if (key == "symmetric") {
                   only_for(k, quant::kOptSymmetric);
                   s.symmetric = boolean(c, v, "symmetric");
                 } else if (key == "pack_int32") {
                   only_for(k, quant::kOptPackInt32);
                   s.int_pack_int32 = boolean(c, v, "pack_int32");
                 }
               });
  return s;
}

Pattern parse_pattern(const Ctx& c, const YAML::Node& n, const std::string& arch) {
  Pattern p{scalar(c, n, "a pattern"), loc(c, n)};
  if (p.text.empty()) fail(c, n, "empty pattern");
  if (p.text.starts_with("re:")) {
    try {
      std::regex re(p.text.substr(3));
    } catch (const std::regex_error& e) {
      fail(c, n, fmt::format("invalid regular expression '{}': {}", p.text.substr(3), e.what()));
    }
  } else if (p.text[0] == '@') {
    if (p.text.starts_with("@layer:")) {
      if (!detail::parse_layer_template(p.text)) fail(c, n, fmt::format("'{}': expected @layer:N with N a layer index", p.text));
    } else {
      const auto* table = detail::arch_templates(arch);
      if (!table) fail(c, n, fmt::format("template '{}' needs a known 'arch' ({})", p.text, detail::recipe_family_names()));
      bool found = false;
      std::string names;
      for (const auto& t : *table) {
        found = found || p.text.substr(1) == t.name;
        names += fmt::format("{}@{}", names.empty() ? "" : ", ", t.name);
      }
      if (!found)
        fail(c, n, fmt::format("unknown template '{}' for arch '{}' (it has: {}, @layer:N)", p.text, arch, names));
    }
  }
  return p;
}

std::vector<Pattern> parse_patterns(const Ctx& c, const YAML::Node& n, const std::string& arch,
                                    const std::string& what) {
  std::vector<Pattern> out;
  if (n.IsScalar()) {
    out.push_back(parse_pattern(c, n, arch));
  } else if (n.IsSequence()) {
    for (const auto& item : n) out.push_back(parse_pattern(c, item, arch));
  } else if (!n.IsNull()) {
    fail(c, n, fmt::format("{} must be a pattern or a list of patterns", what));
  }
  return out;
}

// A scheme given as `name`, or `{scheme: name, options: {...}}` (for `default`).
SchemeSpec parse_scheme_node(const Ctx& c, const YAML::Node& n, quant::Rounding recipe_rounding) {
  if (n.IsScalar()) return parse_scheme(c, n, YAML::Node(), recipe_rounding);
  YAML::Node name, options;
  bool has_name = false;
  for_each_key(c, n, "default", {"scheme", "options"}, [&](const std::string& key, const YAML::Node&, const YAML::Node& v) {
    if (key == "scheme") name.reset(v), has_name = true;
    else options.reset(v);
  });
  if (!has_name) fail(c, n, "default needs 'scheme'");
  return parse_scheme(c, name, options, recipe_rounding);
}

// serving: the settings the checkpoint will be served with (constraints).
void parse_serving(const Ctx& c, const YAML::Node& v, Recipe& r) {
  if (v.IsNull()) return;
  for_each_key(c, v, "serving", {"kv_cache", "prefill_query_quant"},
               [&](const std::string& sk, const YAML::Node&, const YAML::Node& sv) {
                 if (sk == "kv_cache") {
                   r.fp8_kv_cache = lookup<bool>(c, sv, "kv_cache",
                                                 {{"fp8", true}, {"fp8_e4m3", true}, {"fp8_e5m2", true},
                                                  {"bf16", false}, {"fp16", false}, {"auto", false}});
                 } else {
                   r.fp8_prefill_query = boolean(c, sv, "prefill_query_quant");
                 }
               });
}

// One item of `rules:`: its patterns and its scheme (or keep).
Rule parse_rule(const Ctx& c, const YAML::Node& item, const Recipe& r) {
  Rule rule;
  rule.where = loc(c, item);
  // A default-constructed YAML::Node counts as defined, hence the flags.
  YAML::Node match, scheme, options;
  bool has_match = false, has_scheme = false;
  for_each_key(c, item, "a rule", {"match", "scheme", "options", "description"},
               [&](const std::string& rk, const YAML::Node&, const YAML::Node& rv) {
                 if (rk == "match") match.reset(rv), has_match = true;
                 else if (rk == "scheme") scheme.reset(rv), has_scheme = true;
                 else if (rk == "options") options.reset(rv);
                 else scalar(c, rv, "description");
               });
  if (!has_match) fail(c, item, "rule needs 'match'");
  if (!has_scheme) fail(c, item, "rule needs 'scheme'");
  rule.match = parse_patterns(c, match, r.arch, "match");
  if (rule.match.empty()) fail(c, match, "match lists no pattern");
  if (scheme.IsScalar() && scheme.Scalar() == "keep") {
    if (options && !options.IsNull()) fail(c, options, "scheme 'keep' takes no options");
    rule.keep = true;
  } else {
    rule.scheme = parse_scheme(c, scheme, options, r.rounding.value_or(quant::Rounding::Nearest));
  }
  return rule;
}

YAML::Node load_yaml(const std::string& yaml_text, const std::string& path_for_errors) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw_bad_input(fmt::format("invalid YAML: {}", e.msg),
                    ErrorWhere(fmt::format("{}:{}:{}", path_for_errors, e.mark.line + 1, e.mark.column + 1)));
  }
  if (!root.IsMap()) throw_bad_input("a recipe must be a YAML mapping", ErrorWhere(path_for_errors));
  return root;
}

}  // namespace

Recipe parse_recipe(const std::string& yaml_text, const std::string& path_for_errors) {
  Ctx c{path_for_errors};
  const YAML::Node root = load_yaml(yaml_text, path_for_errors);
  Recipe r;
  r.path = path_for_errors;
  r.text = yaml_text;
  // arch first: template references are validated against it.
  if (const auto a = root["arch"]; a && !a.IsNull()) {
    r.arch = scalar(c, a, "arch");
    if (!detail::arch_templates(r.arch))
      fail(c, a, fmt::format("unknown arch '{}' (expected {})", r.arch, detail::recipe_family_names()));
  }
  // rounding too: it is every rule's unless the rule's options say otherwise.
  if (const auto rn = root["rounding"]; rn && !rn.IsNull()) r.rounding = rounding(c, rn);
  bool have_name = false;
  for_each_key(
      c, root, "the recipe",
      {"name", "description", "arch", "dialect", "serving", "exclude", "rules", "default", "requantize", "rounding",
       "rotation", "rotation_block"},
      [&](const std::string& key, const YAML::Node&, const YAML::Node& v) {
        if (key == "rounding" || key == "arch") {
          return;  // read above
        } else if (key == "name") {
          r.name = scalar(c, v, "name");
          have_name = !r.name.empty();
        } else if (key == "description") {
          scalar(c, v, "description");
        } else if (key == "requantize") {
          r.requantize = boolean(c, v, "requantize");
        } else if (key == "rotation") {
          r.rotation = scalar(c, v, "rotation");
          if (r.rotation != "none" && r.rotation != "r1" && r.rotation != "r1r2")
            fail(c, v, fmt::format("unknown rotation '{}' (none, r1 or r1r2)", r.rotation));
        } else if (key == "rotation_block") {
          r.rotation_block = integer(c, v, "rotation_block");
          if (r.rotation_block < 0) fail(c, v, "rotation_block must be 0 (the whole hidden size) or a block size");
        } else if (key == "dialect") {
          r.dialect = scalar(c, v, "dialect");  // checked against export's list by the plan
          r.dialect_where = loc(c, v);
        } else if (key == "serving") {
          parse_serving(c, v, r);
        } else if (key == "exclude") {
          r.exclude = parse_patterns(c, v, r.arch, "exclude");
        } else if (key == "rules") {
          if (v.IsNull()) return;
          if (!v.IsSequence()) fail(c, v, "rules must be a list");
          for (const auto& item : v) r.rules.push_back(parse_rule(c, item, r));
        } else if (key == "default") {
          if (!v.IsNull()) r.default_scheme = parse_scheme_node(c, v, r.rounding.value_or(quant::Rounding::Nearest));
        }
      });
  if (!have_name) throw_bad_input("the recipe needs a non-empty 'name'", ErrorWhere(path_for_errors));
  if (r.dialect.empty()) r.dialect = "compressed-tensors";
  return r;
}

Recipe with_rounding(const Recipe& recipe, quant::Rounding rounding) {
  if (recipe.rounding) {
    if (*recipe.rounding == rounding) return recipe;
    throw_bad_input(fmt::format("rounding {} conflicts with the recipe's own 'rounding: {}'; drop one of them",
                                quant::rounding_name(rounding), quant::rounding_name(*recipe.rounding)),
                    ErrorWhere(recipe.path));
  }
  if (rounding == quant::Rounding::Nearest) return recipe;  // the default: the recipe (and its text) as it is
  // The recipe as if it said so itself: its text, hashed into the run's
  // fingerprint and kept in the manifest, parses to what the run does.
  std::string text = recipe.text;
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += fmt::format("rounding: {}  # selq --rounding {}\n", quant::rounding_name(rounding), quant::rounding_name(rounding));
  return parse_recipe(text, recipe.path);
}

Recipe with_rotation(const Recipe& recipe, const std::string& rotation) {
  if (!recipe.rotation.empty()) {
    if (recipe.rotation == rotation) return recipe;
    throw_bad_input(fmt::format("rotation {} conflicts with the recipe's own 'rotation: {}'; drop one of them", rotation,
                                recipe.rotation),
                    ErrorWhere(recipe.path));
  }
  if (rotation == "none") return recipe;
  std::string text = recipe.text;
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += fmt::format("rotation: {}  # selq --rotation {}\n", rotation, rotation);
  return parse_recipe(text, recipe.path);
}

Recipe with_rotation_block(const Recipe& recipe, int block) {
  if (recipe.rotation_block == block) return recipe;
  if (recipe.rotation_block != 0)
    throw_bad_input(fmt::format("rotation block {} conflicts with the recipe's own 'rotation_block: {}'; drop one of them",
                                block, recipe.rotation_block),
                    ErrorWhere(recipe.path));
  std::string text = recipe.text;
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += fmt::format("rotation_block: {}  # selq --rotation-block {}\n", block, block);
  return parse_recipe(text, recipe.path);
}

Recipe load_recipe(const std::string& name_or_path) {
  const std::string path = resolve_recipe_path(name_or_path);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_io("cannot open recipe", ErrorWhere(path));
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_io("cannot read recipe", ErrorWhere(path));
  return parse_recipe(ss.str(), path);
}

}  // namespace selq::recipe
