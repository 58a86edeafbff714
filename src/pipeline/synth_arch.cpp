// Tensor names, shapes and config.json of the synthetic architectures.
// dspark: the 5-layer MLA speculative draft (hidden 7168, o_proj (7168, 8192),
// context_proj over two concatenated hidden states, markov_head and
// confidence_head; the heads' shapes are not published, so they are assumed:
// markov_head (hidden, hidden), confidence_head (1, hidden)).
// kimi-k3 / deepseek-v3: DeepSeek-V3 layout (MLA attention, dense layer 0,
// routed + shared experts, router gate); kimi-k2 is that under model_type
// kimi_k2 with Kimi-K2's heads and router; kimi-k3 adds a vision tower,
// mm_projector, residual projections and short convolutions in attention.
// llama: the SmolLM2-style Llama layout.
#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/spoken_list.h"
#include "pipeline/synth.h"

namespace selq::pipeline {

namespace {

struct Dims {
  std::int64_t hidden, intermediate, moe_intermediate, vocab;
  std::int64_t heads, q_lora, kv_lora, rope_dim, nope_dim, v_dim;
  int layers, experts, shared_experts, first_dense;
};

std::int64_t scaled(std::int64_t v, int scale, std::int64_t multiple = 32) {
  std::int64_t s = v / scale;
  s = std::max<std::int64_t>(multiple, (s / multiple) * multiple);
  return s;
}

class Builder {
 public:
  explicit Builder(SynthModel& m) : m_(m) {}
  void linear(const std::string& name, std::int64_t out, std::int64_t in) {
    m_.tensors.push_back({{name, DType::BF16, {out, in}}, 0.5f / std::sqrt(static_cast<float>(in)), false});
  }
  void norm(const std::string& name, std::int64_t n) {
    m_.tensors.push_back({{name, DType::BF16, {n}}, 1.0f, true});
  }
  void raw(const std::string& name, Shape shape, float scale) {
    m_.tensors.push_back({{name, DType::BF16, std::move(shape)}, scale, false});
  }

 private:
  SynthModel& m_;
};

void mla_attention(Builder& b, const std::string& p, const Dims& d, bool kimi_extras) {
  const std::int64_t qk = d.nope_dim + d.rope_dim;
  b.linear(p + "self_attn.q_a_proj.weight", d.q_lora, d.hidden);
  b.norm(p + "self_attn.q_a_layernorm.weight", d.q_lora);
  b.linear(p + "self_attn.q_b_proj.weight", d.heads * qk, d.q_lora);
  b.linear(p + "self_attn.kv_a_proj_with_mqa.weight", d.kv_lora + d.rope_dim, d.hidden);
  b.norm(p + "self_attn.kv_a_layernorm.weight", d.kv_lora);
  b.linear(p + "self_attn.kv_b_proj.weight", d.heads * (d.nope_dim + d.v_dim), d.kv_lora);
  b.linear(p + "self_attn.o_proj.weight", d.hidden, d.heads * d.v_dim);
  if (kimi_extras) {
    // Short depthwise convolutions over q/k/v and a gated residual projection.
    for (const char* c : {"q", "k", "v"})
      b.raw(p + fmt::format("self_attn.{}_conv1d.weight", c), {d.heads * qk, 1, 4}, 0.3f);
    b.linear(p + "self_attn.attn_res_proj.weight", d.hidden, d.hidden);
  }
}

void dense_mlp(Builder& b, const std::string& p, std::int64_t hidden, std::int64_t inter) {
  b.linear(p + "mlp.gate_proj.weight", inter, hidden);
  b.linear(p + "mlp.up_proj.weight", inter, hidden);
  b.linear(p + "mlp.down_proj.weight", hidden, inter);
}

void moe_mlp(Builder& b, const std::string& p, const Dims& d) {
  b.raw(p + "mlp.gate.weight", {d.experts, d.hidden}, 0.02f);
  b.raw(p + "mlp.gate.e_score_correction_bias", {d.experts}, 0.01f);
  for (int e = 0; e < d.experts; ++e) {
    const std::string ep = p + fmt::format("mlp.experts.{}.", e);
    b.linear(ep + "gate_proj.weight", d.moe_intermediate, d.hidden);
    b.linear(ep + "up_proj.weight", d.moe_intermediate, d.hidden);
    b.linear(ep + "down_proj.weight", d.hidden, d.moe_intermediate);
  }
  const std::int64_t si = d.moe_intermediate * d.shared_experts;
  b.linear(p + "mlp.shared_experts.gate_proj.weight", si, d.hidden);
  b.linear(p + "mlp.shared_experts.up_proj.weight", si, d.hidden);
  b.linear(p + "mlp.shared_experts.down_proj.weight", d.hidden, si);
}

nlohmann::json mla_config(const Dims& d, const std::string& model_type, const std::string& arch_class) {
  return {{"architectures", {arch_class}},
          {"model_type", model_type},
          {"hidden_size", d.hidden},
          {"intermediate_size", d.intermediate},
          {"moe_intermediate_size", d.moe_intermediate},
          {"num_hidden_layers", d.layers},
          {"num_attention_heads", d.heads},
          {"num_key_value_heads", d.heads},
          {"q_lora_rank", d.q_lora},
          {"kv_lora_rank", d.kv_lora},
          {"qk_rope_head_dim", d.rope_dim},
          {"qk_nope_head_dim", d.nope_dim},
          {"v_head_dim", d.v_dim},
          {"n_routed_experts", d.experts},
          {"n_shared_experts", d.shared_experts},
          {"first_k_dense_replace", d.first_dense},
          {"num_nextn_predict_layers", 0},
          {"vocab_size", d.vocab},
          {"rms_norm_eps", 1e-6},
          {"torch_dtype", "bfloat16"},
          {"tie_word_embeddings", false}};
}

SynthModel dspark(const SynthOptions& o) {
  Dims d{scaled(7168, o.scale), scaled(18432, o.scale), 0, o.vocab > 0 ? o.vocab : scaled(129280, o.scale),
         std::max<std::int64_t>(1, 64 / o.scale), scaled(1536, o.scale), scaled(512, o.scale), 64, 128, 128,
         o.layers > 0 ? o.layers : 5, 0, 0, 0};
  SynthModel m;
  m.config = mla_config(d, "dspark", "DSparkDraftModel");
  m.config["first_k_dense_replace"] = d.layers;
  Builder b(m);
  b.raw("model.embed_tokens.weight", {d.vocab, d.hidden}, 0.02f);
  b.linear("model.context_proj.weight", d.hidden, 2 * d.hidden);
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    b.norm(p + "input_layernorm.weight", d.hidden);
    mla_attention(b, p, d, false);
    b.norm(p + "post_attention_layernorm.weight", d.hidden);
    dense_mlp(b, p, d.hidden, d.intermediate);
  }
  b.norm("model.norm.weight", d.hidden);
  b.linear("model.markov_head.weight", d.hidden, d.hidden);
  b.linear("model.confidence_head.weight", 1, d.hidden);
  b.raw("lm_head.weight", {d.vocab, d.hidden}, 0.02f);
  return m;
}

// The DeepSeek-V3 layouts: its own; Kimi-K2 (its layout and code under
// model_type kimi_k2, with Kimi-K2's 64 heads and router); Kimi-K3 (a vision
// tower and convolutions besides, no router config: recipe tests only).
enum class MlaFlavor { DeepseekV3, KimiK2, KimiK3 };

// The router and RoPE as the flavor configures them, so that selq's runtime
// and transformers run the model. DeepSeek-V3: its 256 experts in 8 groups,
// 4 chosen, 8 experts per token; scaled down at most 4 groups and 2 experts per
// token, as far as the experts allow. Kimi-K2: one group, 8 experts per token
// at scale 1 (2 scaled down), routed_scaling_factor 2.827, rope_theta 50000.
nlohmann::json router_config(MlaFlavor flavor, const Dims& d, bool real_size) {
  int groups = 1, topk_groups = 1, per_token = std::min(real_size ? 8 : 2, d.experts);
  if (flavor == MlaFlavor::DeepseekV3) {
    for (int g = real_size ? 8 : 4; g >= 2 && groups == 1; g /= 2)  // the most groups of at least 2 experts
      if (d.experts % g == 0 && d.experts / g >= 2) groups = g;
    topk_groups = std::max(1, groups / 2);
    per_token = std::min(real_size ? 8 : 2, topk_groups * (d.experts / groups));
  }
  const bool k2 = flavor == MlaFlavor::KimiK2;
  return {{"n_group", groups},
          {"topk_group", topk_groups},
          {"num_experts_per_tok", per_token},
          {"routed_scaling_factor", k2 ? 2.827 : 2.5},
          {"norm_topk_prob", true},
          {"scoring_func", "sigmoid"},
          {"topk_method", "noaux_tc"},
          {"hidden_act", "silu"},
          {"rope_theta", k2 ? 50000.0 : 10000.0},
          {"max_position_embeddings", 4096},
          {"attention_bias", false}};
}

SynthModel deepseek_like(const SynthOptions& o, MlaFlavor flavor) {
  const bool kimi = flavor == MlaFlavor::KimiK3;
  // At scale 1 a deepseek-v3 is DeepSeek-V3's own config (128 heads, its router).
  const bool real_v3 = flavor == MlaFlavor::DeepseekV3 && o.scale == 1;
  Dims d{scaled(7168, o.scale), scaled(18432, o.scale), scaled(2048, o.scale),
         o.vocab > 0 ? o.vocab : scaled(163840, o.scale), real_v3 ? 128 : std::max<std::int64_t>(1, 64 / o.scale),
         scaled(1536, o.scale), scaled(512, o.scale), 64, 128, 128,
         o.layers > 0 ? o.layers : 4, o.experts > 0 ? o.experts : 8, 1, 1};
  SynthModel m;
  m.config = kimi ? mla_config(d, "kimi_k3", "KimiK3ForConditionalGeneration")
                  : mla_config(d, flavor == MlaFlavor::KimiK2 ? "kimi_k2" : "deepseek_v3", "DeepseekV3ForCausalLM");
  if (!kimi) m.config.update(router_config(flavor, d, o.scale == 1));
  Builder b(m);
  if (kimi) {
    const std::int64_t vh = scaled(1152, o.scale);
    b.linear("vision_tower.blocks.0.attn.qkv.weight", 3 * vh, vh);
    b.linear("vision_tower.blocks.0.attn.proj.weight", vh, vh);
    b.linear("vision_tower.blocks.0.mlp.fc1.weight", 4 * vh, vh);
    b.linear("vision_tower.blocks.0.mlp.fc2.weight", vh, 4 * vh);
    b.norm("vision_tower.blocks.0.norm1.weight", vh);
    b.linear("mm_projector.linear_1.weight", d.hidden, 4 * vh);
    b.linear("mm_projector.linear_2.weight", d.hidden, d.hidden);
  }
  b.raw("model.embed_tokens.weight", {d.vocab, d.hidden}, 0.02f);
  for (int l = 0; l < d.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    b.norm(p + "input_layernorm.weight", d.hidden);
    mla_attention(b, p, d, kimi);
    b.norm(p + "post_attention_layernorm.weight", d.hidden);
    if (l < d.first_dense)
      dense_mlp(b, p, d.hidden, d.intermediate);
    else
      moe_mlp(b, p, d);
  }
  b.norm("model.norm.weight", d.hidden);
  b.raw("lm_head.weight", {d.vocab, d.hidden}, 0.02f);
  return m;
}

SynthModel llama(const SynthOptions& o) {
  const std::int64_t hidden = scaled(576, o.scale), inter = scaled(1536, o.scale);
  const std::int64_t head_dim = 64, heads = std::max<std::int64_t>(1, hidden / head_dim), kv_heads = std::max<std::int64_t>(1, heads / 3);
  const std::int64_t vocab = o.vocab > 0 ? o.vocab : scaled(49152, o.scale);
  const int layers = o.layers > 0 ? o.layers : 4;
  SynthModel m;
  m.config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
              {"hidden_size", hidden},                 {"intermediate_size", inter},
              {"num_hidden_layers", layers},           {"num_attention_heads", heads},
              {"num_key_value_heads", kv_heads},       {"head_dim", head_dim},
              {"vocab_size", vocab},                   {"rms_norm_eps", 1e-5},
              {"rope_theta", 100000.0},                {"max_position_embeddings", 8192},
              {"hidden_act", "silu"},                  {"tie_word_embeddings", true},
              {"torch_dtype", "bfloat16"}};
  Builder b(m);
  b.raw("model.embed_tokens.weight", {vocab, hidden}, 0.02f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}.", l);
    b.norm(p + "input_layernorm.weight", hidden);
    b.linear(p + "self_attn.q_proj.weight", heads * head_dim, hidden);
    b.linear(p + "self_attn.k_proj.weight", kv_heads * head_dim, hidden);
    b.linear(p + "self_attn.v_proj.weight", kv_heads * head_dim, hidden);
    b.linear(p + "self_attn.o_proj.weight", hidden, heads * head_dim);
    b.norm(p + "post_attention_layernorm.weight", hidden);
    dense_mlp(b, p, hidden, inter);
  }
  b.norm("model.norm.weight", hidden);
  return m;
}

SynthModel deepseek_v3(const SynthOptions& o) { return deepseek_like(o, MlaFlavor::DeepseekV3); }
SynthModel kimi_k3(const SynthOptions& o) { return deepseek_like(o, MlaFlavor::KimiK3); }
SynthModel kimi_k2(const SynthOptions& o) { return deepseek_like(o, MlaFlavor::KimiK2); }

// {name, recipe family, generator, routed experts, written with a tokenizer}
constexpr std::array<SynthArchitecture, 5> kSynthArchitectures{{
    {"dspark", "dspark", dspark, false, false},
    {"kimi-k3", "kimi-k3", kimi_k3, true, false},  // model_type kimi_k3 (a vision tower too): the runtime refuses it
    {"kimi-k2", "deepseek-v3", kimi_k2, true, true},
    {"deepseek-v3", "deepseek-v3", deepseek_v3, true, true},
    {"llama", "llama", llama, false, false},
}};

}  // namespace

std::span<const SynthArchitecture> synth_architectures() { return kSynthArchitectures; }

std::string synth_architecture_names() {
  std::vector<std::string> v;
  for (const auto& a : kSynthArchitectures) v.emplace_back(a.name);
  return spoken_list(v, "or");
}

const SynthArchitecture& synth_architecture(const std::string& name) {
  for (const auto& a : kSynthArchitectures)
    if (name == a.name) return a;
  throw_bad_input(fmt::format("unknown architecture '{}' (expected {})", name, synth_architecture_names()));
}

SynthModel describe_synth_model(const SynthOptions& o) {
  if (o.scale < 1) throw_bad_input("scale must be >= 1");
  if (o.dtype != DType::BF16 && o.dtype != DType::F32)
    throw_bad_input(fmt::format("a synthetic checkpoint is BF16 or F32, not {}", dtype_name(o.dtype)));
  if (o.dtype == DType::F32 && o.experts_nvfp4) throw_bad_input("NVFP4 routed experts are quantized from BF16 weights");
  SynthModel m = synth_architecture(o.arch).describe(o);
  if (o.dtype == DType::F32) {  // the same values, unrounded (exactness tests)
    for (auto& t : m.tensors) t.info.dtype = DType::F32;
    m.config["torch_dtype"] = "float32";
  }
  return m;
}

}  // namespace selq::pipeline
