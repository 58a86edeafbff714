#include "recipe/names.h"

#include "core/expert_name.h"
#include "core/spoken_list.h"
#include "recipe/fused_modules.h"

#include <algorithm>
#include <array>
#include <charconv>

namespace selq::recipe::detail {
namespace {

template <std::size_t N>
bool one_of(std::string_view s, const std::array<std::string_view, N>& set) {
  return std::find(set.begin(), set.end(), s) != set.end();
}

std::optional<int> parse_uint(std::string_view s) {
  if (s.empty() || s.size() > 9) return std::nullopt;
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// Matches one non-'*' pattern element at p against c; sets `advance` to its
// length in the pattern. A '[' without a closing ']' is a literal, as in fnmatch.
bool match_one(std::string_view pat, std::size_t p, char c, std::size_t& advance) {
  if (pat[p] == '?') {
    advance = 1;
    return true;
  }
  if (pat[p] == '[') {
    std::size_t j = p + 1;
    bool negate = j < pat.size() && pat[j] == '!';
    if (negate) ++j;
    std::size_t close = j < pat.size() ? pat.find(']', j + 1) : std::string_view::npos;
    if (close != std::string_view::npos) {
      bool in = false;
      for (std::size_t k = j; k < close; ++k) {
        if (k + 2 < close && pat[k + 1] == '-') {
          if (c >= pat[k] && c <= pat[k + 2]) in = true;
          k += 2;
        } else if (pat[k] == c) {
          in = true;
        }
      }
      advance = close - p + 1;
      return in != negate;
    }
  }
  advance = 1;
  return pat[p] == c;
}

// ---- template predicates ----
constexpr std::array<std::string_view, 3> kMoeParents{"mlp", "block_sparse_moe", "moe"};
constexpr std::array<std::string_view, 3> kMlpProjs{"gate_proj", "up_proj", "down_proj"};
constexpr std::array<std::string_view, 6> kMlaProjs{"q_proj",           "q_a_proj", "q_b_proj",
                                                    "kv_a_proj_with_mqa", "kv_b_proj", "o_proj"};
constexpr std::array<std::string_view, 4> kLlamaAttn{"q_proj", "k_proj", "v_proj", "o_proj"};

bool t_mla_attention(const NameInfo& n, const ArchContext&) {
  return n.rest_size() == 2 && n.rest(0) == "self_attn" && one_of(n.rest(1), kMlaProjs);
}
// Kimi-K3 mixes MLA and linear-attention layers, whose self_attn holds more
// projections than MLA's; everything under self_attn but convs, residual
// projections (own template) and norms.
bool t_kimi_attention(const NameInfo& n, const ArchContext&) {
  if (n.rest_size() < 2 || n.rest(0) != "self_attn") return false;
  return !n.last().ends_with("conv1d") && !n.last().ends_with("_res_proj") &&
         n.last().find("norm") == std::string_view::npos;
}
bool t_llama_attention(const NameInfo& n, const ArchContext&) {
  return n.rest_size() == 2 && n.rest(0) == "self_attn" && one_of(n.rest(1), kLlamaAttn);
}
bool t_experts(const NameInfo& n, const ArchContext&) {
  return n.rest_size() >= 3 && one_of(n.rest(0), kMoeParents) && n.rest(1) == "experts";
}
bool t_shared_experts(const NameInfo& n, const ArchContext&) {
  return n.rest_size() >= 3 && one_of(n.rest(0), kMoeParents) &&
         (n.rest(1) == "shared_experts" || n.rest(1) == "shared_expert");
}
bool t_router(const NameInfo& n, const ArchContext&) {
  return n.rest_size() == 2 && one_of(n.rest(0), kMoeParents) && n.rest(1) == "gate";
}
bool t_mlp(const NameInfo& n, const ArchContext&) {
  return n.rest_size() == 2 && n.rest(0) == "mlp" && one_of(n.rest(1), kMlpProjs);
}
bool t_moe_dense_mlp(const NameInfo& n, const ArchContext& ctx) {
  return t_mlp(n, ctx) && n.layer < ctx.first_k_dense;
}
bool t_mtp(const NameInfo& n, const ArchContext& ctx) {
  return n.layer >= 0 && ctx.num_hidden_layers && n.layer >= *ctx.num_hidden_layers;
}
bool t_moe_heads(const NameInfo& n, const ArchContext&) {
  if (n.last() == "lm_head") return true;
  return n.comps.size() >= 2 && n.last() == "head" && n.comps[n.comps.size() - 2] == "shared_head";
}
bool t_dspark_heads(const NameInfo& n, const ArchContext&) {
  for (auto c : n.comps)
    if (c == "lm_head" || c == "markov_head" || c == "confidence_head") return true;
  return false;
}
bool t_lm_head(const NameInfo& n, const ArchContext&) { return n.last() == "lm_head"; }
bool t_vision(const NameInfo& n, const ArchContext&) {
  for (auto c : n.comps)
    if (c == "vision_tower" || c == "mm_projector" || c == "multi_modal_projector") return true;
  return false;
}
bool t_res_proj(const NameInfo& n, const ArchContext&) { return n.last().ends_with("_res_proj"); }
bool t_conv1d(const NameInfo& n, const ArchContext&) {
  return n.rest_size() >= 2 && n.rest(0) == "self_attn" && n.last().ends_with("conv1d");
}
bool t_context_proj(const NameInfo& n, const ArchContext&) { return n.last() == "context_proj"; }
bool t_embeddings(const NameInfo& n, const ArchContext&) {
  bool linear = false;
  return protected_kind(n, linear) == "embedding";
}

const std::vector<TemplateDef> kDeepseek{
    {"attention", t_mla_attention, "self_attn.{q_proj,q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj}"},
    {"experts", t_experts, "mlp.experts.* (every routed expert projection)"},
    {"shared_experts", t_shared_experts, "mlp.shared_experts.*"},
    {"dense_mlp", t_moe_dense_mlp, "mlp.{gate,up,down}_proj of layers < first_k_dense_replace"},
    {"mlp", t_mlp, "mlp.{gate,up,down}_proj of any layer (not experts)"},
    {"router", t_router, "mlp.gate (the MoE router)"},
    {"mtp", t_mtp, "every module of layers >= num_hidden_layers"},
    {"heads", t_moe_heads, "lm_head, shared_head.head"},
    {"embeddings", t_embeddings, "embed_tokens"},
};
const std::vector<TemplateDef> kKimi{
    {"attention", t_kimi_attention, "self_attn.* except *conv1d, *_res_proj and norms"},
    {"experts", t_experts, "{mlp,block_sparse_moe}.experts.*"},
    {"shared_experts", t_shared_experts, "{mlp,block_sparse_moe}.shared_experts.*"},
    {"dense_mlp", t_moe_dense_mlp, "mlp.{gate,up,down}_proj of layers < first_k_dense_replace"},
    {"mlp", t_mlp, "mlp.{gate,up,down}_proj of any layer (not experts)"},
    {"router", t_router, "{mlp,block_sparse_moe}.gate"},
    {"mtp", t_mtp, "every module of layers >= num_hidden_layers"},
    {"heads", t_moe_heads, "lm_head, shared_head.head"},
    {"vision", t_vision, "vision_tower.*, mm_projector.*, multi_modal_projector.*"},
    {"res_proj", t_res_proj, "*_res_proj"},
    {"conv1d", t_conv1d, "self_attn.*conv1d"},
    {"embeddings", t_embeddings, "embed_tokens"},
};
const std::vector<TemplateDef> kDspark{
    {"attention", t_mla_attention, "self_attn.{q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj}"},
    {"mlp", t_mlp, "mlp.{gate,up,down}_proj"},
    {"dense_mlp", t_mlp, "mlp.{gate,up,down}_proj (every dspark layer is dense)"},
    {"context_proj", t_context_proj, "context_proj"},
    {"heads", t_dspark_heads, "lm_head, markov_head, confidence_head"},
    {"embeddings", t_embeddings, "embed_tokens"},
};
const std::vector<TemplateDef> kLlama{
    {"attention", t_llama_attention, "self_attn.{q,k,v,o}_proj"},
    {"mlp", t_mlp, "mlp.{gate,up,down}_proj"},
    {"dense_mlp", t_mlp, "mlp.{gate,up,down}_proj (every llama layer is dense)"},
    {"heads", t_lm_head, "lm_head"},
    {"embeddings", t_embeddings, "embed_tokens"},
};

std::optional<int> json_int(const nlohmann::json& config, const char* key) {
  if (!config.is_object()) return std::nullopt;
  for (const nlohmann::json* c : {&config, config.contains("text_config") ? &config["text_config"] : nullptr}) {
    if (c && c->is_object() && c->contains(key) && (*c)[key].is_number_integer())
      return (*c)[key].get<int>();
  }
  return std::nullopt;
}

}  // namespace

bool has_glob_wildcard(std::string_view text) {
  return text.find_first_of("*?[") != std::string_view::npos;
}

bool glob_match(std::string_view pat, std::string_view name) {
  constexpr auto npos = std::string_view::npos;
  std::size_t p = 0, n = 0, star_p = npos, star_n = 0;
  while (n < name.size()) {
    if (p < pat.size() && pat[p] == '*') {
      star_p = ++p;
      star_n = n;
      continue;
    }
    std::size_t adv = 0;
    if (p < pat.size() && match_one(pat, p, name[n], adv)) {
      p += adv;
      ++n;
      continue;
    }
    if (star_p == npos) return false;
    p = star_p;
    n = ++star_n;
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

NameInfo::NameInfo(std::string_view module_name) : module(module_name) {
  std::size_t start = 0;
  while (true) {
    std::size_t dot = module_name.find('.', start);
    comps.push_back(module_name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  rest_begin = comps.size();
  // The first "layers.N" outside a vision or audio tower is the decoder's
  // (model.layers, model.decoder.layers, gpt_neox.layers, backbone.layers,
  // transformer.encoder.layers of ChatGLM): "vision_tower.encoder.layers.3" is not layer 3.
  constexpr std::array<std::string_view, 8> kTowers = {"vision_tower", "vision_model", "visual",       "vision",
                                                       "vision_encoder", "audio_tower", "audio_model", "audio_encoder"};
  for (std::size_t i = 0; i + 1 < comps.size(); ++i) {
    if (one_of(comps[i], kTowers)) break;
    if (comps[i] != "layers") continue;
    if (auto v = parse_uint(comps[i + 1])) {
      layer = *v;
      rest_begin = i + 2;
      break;
    }
  }
}

ArchContext make_arch_context(const nlohmann::json& config) {
  ArchContext ctx;
  if (auto k = json_int(config, "first_k_dense_replace")) ctx.first_k_dense = *k;
  ctx.num_hidden_layers = json_int(config, "num_hidden_layers");
  return ctx;
}

std::span<const RecipeFamily> recipe_families() {
  // One row per family. A new architecture's recipe family adds its row and
  // its templates here (the runtime's and synth's rows name it).
  static const std::array<RecipeFamily, 4> kFamilies{{
      {"kimi-k3", &kKimi, true},
      {"deepseek-v3", &kDeepseek, true},
      {"dspark", &kDspark, true},
      {"llama", &kLlama, false},
  }};
  return kFamilies;
}

const RecipeFamily* find_recipe_family(std::string_view name) {
  for (const auto& f : recipe_families())
    if (name == f.name) return &f;
  return nullptr;
}

std::string recipe_family_names() {
  std::vector<std::string> v;
  for (const auto& f : recipe_families()) v.emplace_back(f.name);
  return spoken_list(v, "or");
}

const std::vector<TemplateDef>* arch_templates(std::string_view arch) {
  const auto* f = find_recipe_family(arch);
  return f ? f->templates : nullptr;
}

bool arch_has_mla(std::string_view arch) {
  const auto* f = find_recipe_family(arch);
  return f && f->mla;
}

std::optional<int> parse_layer_template(std::string_view text) {
  if (!text.starts_with("@layer:")) return std::nullopt;
  return parse_uint(text.substr(7));
}

std::string_view protected_kind(const NameInfo& n, bool& linear) {
  static constexpr std::array<std::string_view, 7> kEmbeddings{
      "embed_tokens", "wte", "wpe", "word_embeddings", "position_embeddings", "tok_embeddings", "embeddings"};
  const std::string_view last = n.last();
  linear = false;
  if (one_of(last, kEmbeddings)) return "embedding";
  if (last.find("norm") != std::string_view::npos) return "norm";
  linear = true;
  for (auto c : n.comps)
    if (c == "lm_head" || c.ends_with("_head")) return "head";
  if (last == "router" ||
      (last == "gate" && n.comps.size() >= 2 && one_of(n.comps[n.comps.size() - 2], kMoeParents)))
    return "router";
  if (last.ends_with("conv1d") || last == "conv") return "conv";
  return {};
}

std::string_view quantized_suffix(std::string_view tensor) {
  static constexpr std::array<std::string_view, 10> kSuffixes{
      "weight_scale", "weight_scale_inv", "weight_scale_2", "weight_global_scale", "input_scale",
      "input_global_scale", "weight_packed", "weight_shape", "weight_zero_point", "weight_g_idx"};
  std::size_t dot = tensor.rfind('.');
  if (dot == std::string_view::npos) return {};
  std::string_view last = tensor.substr(dot + 1);
  return one_of(last, kSuffixes) ? last : std::string_view{};
}

std::string fused_group_key(const NameInfo& n) {
  // All projections of all routed experts of one layer: engines build one
  // fused MoE module and read the scheme of expert 0 (docs/ENGINE_RULES.md §1.2).
  if (const auto container = experts_container(n.module)) return std::string(*container);
  return fused_shard_key(n.module);
}

}  // namespace selq::recipe::detail

namespace selq::recipe {

std::string owning_module(const std::string& tensor) {
  if (tensor.size() > 7 && tensor.compare(tensor.size() - 7, 7, ".weight") == 0) return tensor.substr(0, tensor.size() - 7);
  const std::string_view suffix = detail::quantized_suffix(tensor);
  if (!suffix.empty()) return tensor.substr(0, tensor.size() - suffix.size() - 1);
  return tensor;
}

std::optional<int> layer_index_of(std::string_view name) {
  const detail::NameInfo n(name);
  if (n.layer < 0) return std::nullopt;
  return n.layer;
}

std::string layer_relative_kind(std::string_view module) {
  std::string name(module);  // a routed expert's index as "*": every expert is one kind
  if (const auto e = parse_routed_expert(module); e && !e->rest.empty())
    name.replace(static_cast<std::size_t>(e->index.data() - module.data()), e->index.size(), "*");
  const detail::NameInfo n(name);
  std::string out;
  for (std::size_t i = n.layer < 0 ? 0 : n.rest_begin; i < n.comps.size(); ++i) {
    if (!out.empty()) out += '.';
    out += n.comps[i];
  }
  return out;
}

}  // namespace selq::recipe
