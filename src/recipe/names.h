#pragma once
// Internal to the recipe module: name analysis, glob matching and the
// per-architecture template tables. Templates are hand-written predicates
// over dotted name components rather than regexes because a Kimi-sized
// checkpoint has ~10^5 tensors and std::regex costs microseconds per call.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::recipe::detail {

// fnmatch semantics: `*` any run of characters (dots included), `?` one
// character, `[abc]`, `[a-z]`, `[!abc]` classes; the whole name must match.
bool glob_match(std::string_view pattern, std::string_view name);
// True if the text has a glob wildcard character.
bool has_glob_wildcard(std::string_view text);

// A module name split into dotted components, with the decoder layer found.
struct NameInfo {
  std::string_view module;
  std::vector<std::string_view> comps;
  int layer{-1};              // from the first "layers.N." outside a vision or audio tower
  std::size_t rest_begin{0};  // first component after "layers.N" (== comps.size() if no layer)

  explicit NameInfo(std::string_view module_name);
  std::size_t rest_size() const { return layer < 0 ? 0 : comps.size() - rest_begin; }
  std::string_view rest(std::size_t i) const { return comps[rest_begin + i]; }
  std::string_view last() const { return comps.empty() ? std::string_view{} : comps.back(); }
};

// Inputs templates need from config.json and from the tensor list.
struct ArchContext {
  int first_k_dense{1};                   // first_k_dense_replace (DeepSeek/Kimi; default: layer 0 dense)
  std::optional<int> num_hidden_layers;   // MTP layers have an index >= this
  std::vector<bool> mla_layers;           // layer index -> has self_attn.kv_b_proj
  bool is_mla_layer(int layer) const {
    return layer >= 0 && static_cast<std::size_t>(layer) < mla_layers.size() && mla_layers[layer];
  }
};
ArchContext make_arch_context(const nlohmann::json& config);

struct TemplateDef {
  const char* name;
  bool (*matches)(const NameInfo&, const ArchContext&);
  const char* doc;
};
// A recipe family (recipe `arch:`, `selq plan --arch`): its name, its
// templates (@attention, @experts, ...) and whether its attention is MLA.
struct RecipeFamily {
  const char* name;
  const std::vector<TemplateDef>* templates;
  bool mla;
};
std::span<const RecipeFamily> recipe_families();
// Null when no family has that name.
const RecipeFamily* find_recipe_family(std::string_view name);
// "kimi-k3, deepseek-v3, dspark or llama".
std::string recipe_family_names();
// The family's templates; null when the arch is unknown.
const std::vector<TemplateDef>* arch_templates(std::string_view arch);
// "@layer:N" -> N; nullopt if the text is not of that form.
std::optional<int> parse_layer_template(std::string_view text);
// Archs whose attention is MLA (constraint on kv_b_proj / o_proj applies).
bool arch_has_mla(std::string_view arch);

// Why a float weight must not be picked up by the default scheme, templates
// or wildcard globs ("embedding", "norm", "head", "router", "conv"); empty if
// it is an ordinary linear. `linear` reports whether engines build it as a
// linear layer (heads, routers and convs are; embeddings and norms are not).
std::string_view protected_kind(const NameInfo& info, bool& linear);

// Suffix of an already-quantized tensor's companions ("weight_scale", ...),
// or empty.
std::string_view quantized_suffix(std::string_view tensor);

// Key of the group whose members must share a scheme: all routed experts of a
// layer (one fused MoE module), else the fused module (fused_shard_key); empty if none.
std::string fused_group_key(const NameInfo& info);

}  // namespace selq::recipe::detail
