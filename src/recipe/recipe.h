#pragma once
// Recipes: ordered rules (first match wins), an exclude list that always wins,
// a default scheme for eligible weights no rule matched, templates per
// architecture family (@attention, @experts, ...) and constraints checked at
// plan time. Documented in docs/RECIPES.md.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "quant/scheme.h"

namespace selq::recipe {

struct SourceLocation {
  std::string file;
  int line{0};    // 1-based; 0 if unknown
  int column{0};  // 1-based
};
// "file:line:column", or the file alone when the line is unknown.
std::string where_text(const SourceLocation& l);

// One pattern as written: glob ("model.layers.*.self_attn.o_proj"), regex
// ("re:..."), or template reference ("@attention", "@layer:0").
struct Pattern {
  std::string text;
  SourceLocation where;
};

struct Rule {
  std::vector<Pattern> match;
  quant::SchemeSpec scheme;
  SourceLocation where;
  // `scheme: keep`: matched tensors stay as they are (first match wins, so a
  // keep rule carves tensors out of a broader rule below it). `scheme` unused.
  bool keep{false};
};

struct Recipe {
  std::string path;
  std::string name;
  std::string arch;      // template family: "kimi-k3", "dspark", "deepseek-v3", "llama" or ""
  std::string dialect;   // as written (default "compressed-tensors"); the plan checks it (export/dialect.h)
  SourceLocation dialect_where;
  std::vector<Rule> rules;
  std::vector<Pattern> exclude;
  std::optional<quant::SchemeSpec> default_scheme;
  // Constraint inputs: serving settings the checkpoint will be run with.
  bool fp8_kv_cache{false};
  bool fp8_prefill_query{false};
  // Modules that arrive already quantized and that a rule (or the default)
  // assigns a scheme: dequantized from their stored tensors and quantized
  // again (true), or passed through unchanged with a warning (false).
  bool requantize{false};
  // Top-level `rounding:`, every rule's and the default's unless their
  // options say otherwise (each scheme carries its own: SchemeSpec::rounding).
  std::optional<quant::Rounding> rounding;
  // Top-level `rotation:` ("none", "r1" or "r1r2"; "" when absent): the
  // source must carry that rotation (io/rotation_record.h), which
  // `selq quantize` folds in first (rotation/rotate_checkpoint.h).
  std::string rotation;
  // Top-level `rotation_block:`: the residual rotation block-diagonal in runs
  // of this many channels (0: one rotation of the whole hidden size).
  int rotation_block{0};
  std::string text;  // the YAML source, for the manifest
};

// A recipe file, or a shipped recipe by name ("llama-fp8": recipe/shipped.h).
// Throws selq::Error naming file, line and column on any problem.
Recipe load_recipe(const std::string& name_or_path);
Recipe parse_recipe(const std::string& yaml_text, const std::string& path_for_errors);
// The recipe with `rounding` for every rule and default whose options name
// none (`--rounding`, Python's rounding=): its text with a top-level
// `rounding:` line added, parsed again, so the text the manifest keeps and the
// run's fingerprint hashes says it. Nearest leaves the recipe as it is; a
// recipe whose own top-level rounding differs is an error (BadInput).
Recipe with_rounding(const Recipe& recipe, quant::Rounding rounding);
// The same for a rotation ("none", "r1", "r1r2"; `--rotation`).
Recipe with_rotation(const Recipe& recipe, const std::string& rotation);
// And its block (`--rotation-block`).
Recipe with_rotation_block(const Recipe& recipe, int block);

enum class Action {
  Keep,             // copied unchanged (norms, embeddings, excluded or unmatched float weights)
  Quantize,         // quantized with `scheme`
  PassThrough,      // already-quantized source tensor (or its scale) copied unchanged
  Requantize,       // weight of a pre-quantized module: dequantized, then quantized with `scheme`
  Consumed,         // scale/companion of a requantized module: read, not written
};

struct TensorDecision {
  std::string tensor;   // full tensor name
  std::string module;   // tensor name without the ".weight" suffix (== tensor for non-weights)
  Action action{Action::Keep};
  std::optional<quant::SchemeSpec> scheme;
  int rule_index{-1};   // -1: default scheme, -2: excluded, -3: not eligible, -4: no rule, no default
  bool eligible{false}; // 2-D/3-D float linear weight (lm_head, router and conv included; see protected_name)
  // Embedding, norm, head, router or conv: neither the default scheme, nor
  // templates, nor globs whose last component has a wildcard ever quantize it.
  bool protected_name{false};
  std::string reason;   // why it was kept/passed through ("excluded by ...", "norm", "pre-quantized", ...)
};

inline constexpr int kRuleDefault = -1;
inline constexpr int kRuleExcluded = -2;
inline constexpr int kRuleNotEligible = -3;
inline constexpr int kRuleUnmatched = -4;

struct Resolution {
  std::vector<TensorDecision> decisions;  // same order as the input tensors
  std::vector<std::string> warnings;      // e.g. a pattern that matched nothing
};

// Decides every tensor. `config` is the checkpoint's config.json (may be null).
// Errors (throws): fused group members with different schemes, a template
// constraint violated, an unknown template.
Resolution resolve_recipe(const Recipe& recipe, const std::vector<TensorInfo>& tensors,
                          const nlohmann::json& config);

// The module a tensor belongs to: "x.o_proj" for x.o_proj.weight and for its
// scales and packed forms alike (weight_scale, weight_packed, input_scale...).
std::string owning_module(const std::string& tensor);

// The decoder layer of a module or tensor name (NameInfo's), nullopt outside
// the decoder stack; and the name relative to its layer with any expert index
// replaced by `*` ("self_attn.o_proj", "mlp.experts.*.up_proj"; the whole name
// outside the stack). Plan, inspect, the planner and the report group by them.
std::optional<int> layer_index_of(std::string_view name);
std::string layer_relative_kind(std::string_view module);
// A rule's `scheme:` value and `options:` flow map ("" when the scheme's
// defaults suffice) that parse back to `spec`, for a spec a recipe can state
// (the NVFP4 convention, for one, is the dialect's choice).
struct SchemeText {
  std::string scheme;   // "int4"
  std::string options;  // "{group_size: 128}"
};
SchemeText scheme_text(const quant::SchemeSpec& spec);

// A scheme for messages: its one label, SchemeSpec::name(), and its activations
// ("mxfp4 + mxfp4-dynamic activations", "fp8-block128 (weight-only)").
std::string describe_scheme(const quant::SchemeSpec& spec);

}  // namespace selq::recipe
