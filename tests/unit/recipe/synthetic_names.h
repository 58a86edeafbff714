#pragma once
// Tensor lists (names, dtypes, shapes; no data) of small synthetic models
// with the real architectures' naming, for recipe resolution tests.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace selq::recipe::testing {

struct NameList {
  std::vector<TensorInfo> tensors;
  nlohmann::json config = nlohmann::json::object();

  void add(const std::string& name, Shape shape, DType dtype = DType::BF16) {
    tensors.push_back({name, dtype, std::move(shape)});
  }
  // A linear layer's weight.
  void linear(const std::string& module, std::int64_t out, std::int64_t in, DType dtype = DType::BF16) {
    add(module + ".weight", {out, in}, dtype);
  }
};

// The DSpark draft at full width: 5 MLA layers, hidden 7168, o_proj (7168, 8192).
inline NameList dspark_names(int layers = 5) {
  constexpr std::int64_t H = 7168, I = 18432, V = 4096;
  NameList m;
  m.config = {{"num_hidden_layers", layers}, {"hidden_size", H}};
  m.add("model.embed_tokens.weight", {V, H});
  m.linear("model.context_proj", H, 2 * H);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(p + "input_layernorm.weight", {H});
    m.linear(p + "self_attn.q_a_proj", 1536, H);
    m.add(p + "self_attn.q_a_layernorm.weight", {1536});
    m.linear(p + "self_attn.q_b_proj", 64 * 192, 1536);
    m.linear(p + "self_attn.kv_a_proj_with_mqa", 576, H);
    m.add(p + "self_attn.kv_a_layernorm.weight", {512});
    m.linear(p + "self_attn.kv_b_proj", 64 * 256, 512);
    m.linear(p + "self_attn.o_proj", H, 8192);
    m.add(p + "post_attention_layernorm.weight", {H});
    m.linear(p + "mlp.gate_proj", I, H);
    m.linear(p + "mlp.up_proj", I, H);
    m.linear(p + "mlp.down_proj", H, I);
  }
  m.add("model.norm.weight", {H});
  m.linear("model.markov_head", V, H);
  m.linear("model.confidence_head", 1, H);
  m.linear("lm_head", V, H);
  return m;
}

// Kimi-K3-like: layer 0 dense MLA, layer 1 linear attention (convs) + MoE,
// layer 2 MLA + MoE, layer 3 the MTP layer; a vision tower and projector.
// With `nvfp4_experts` the routed experts arrive as compressed-tensors NVFP4.
inline NameList kimi_names(bool nvfp4_experts = false, int experts = 4) {
  constexpr std::int64_t H = 256, I = 512, EI = 128, V = 1000;
  NameList m;
  m.config = {{"num_hidden_layers", 3}, {"first_k_dense_replace", 1}, {"n_routed_experts", experts}};
  m.add("model.embed_tokens.weight", {V, H});
  auto mla = [&](const std::string& p) {
    m.linear(p + "self_attn.q_a_proj", 64, H);
    m.add(p + "self_attn.q_a_layernorm.weight", {64});
    m.linear(p + "self_attn.q_b_proj", 4 * 48, 64);
    m.linear(p + "self_attn.kv_a_proj_with_mqa", 48, H);
    m.add(p + "self_attn.kv_a_layernorm.weight", {32});
    m.linear(p + "self_attn.kv_b_proj", 4 * 64, 32);
    m.linear(p + "self_attn.o_proj", H, 4 * 32);
  };
  auto linear_attention = [&](const std::string& p) {
    for (const char* x : {"q", "k", "v"}) {
      m.linear(p + "self_attn." + x + "_proj", H, H);
      m.add(p + "self_attn." + x + "_conv1d.weight", {H, 1, 4});
    }
    m.linear(p + "self_attn.f_a_proj", 32, H);
    m.linear(p + "self_attn.f_b_proj", H, 32);
    m.linear(p + "self_attn.b_proj", 4, H);
    m.add(p + "self_attn.A_log", {4}, DType::F32);
    m.add(p + "self_attn.dt_bias", {H}, DType::F32);
    m.add(p + "self_attn.o_norm.weight", {64});
    m.linear(p + "self_attn.o_proj", H, H);
  };
  auto moe = [&](const std::string& p) {
    m.linear(p + "mlp.gate", experts, H);
    m.add(p + "mlp.gate.e_score_correction_bias", {experts}, DType::F32);
    for (int e = 0; e < experts; ++e) {
      const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const bool down = std::string(proj) == "down_proj";
        const std::int64_t out = down ? H : EI, in = down ? EI : H;
        if (nvfp4_experts) {
          m.add(x + proj + ".weight_packed", {out, in / 2}, DType::U8);
          m.add(x + proj + ".weight_scale", {out, in / 16}, DType::F8_E4M3);
          m.add(x + proj + ".weight_global_scale", {1}, DType::F32);
          m.add(x + proj + ".input_global_scale", {1}, DType::F32);
        } else {
          m.linear(x + proj, out, in);
        }
      }
    }
    m.linear(p + "mlp.shared_experts.gate_proj", EI, H);
    m.linear(p + "mlp.shared_experts.up_proj", EI, H);
    m.linear(p + "mlp.shared_experts.down_proj", H, EI);
  };
  for (int l = 0; l < 4; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(p + "input_layernorm.weight", {H});
    if (l == 1) linear_attention(p);
    else mla(p);
    m.add(p + "post_attention_layernorm.weight", {H});
    m.linear(p + "self_attn.attn_res_proj", H, H);
    if (l == 0) {
      m.linear(p + "mlp.gate_proj", I, H);
      m.linear(p + "mlp.up_proj", I, H);
      m.linear(p + "mlp.down_proj", H, I);
    } else {
      moe(p);
    }
    if (l == 3) {  // MTP block
      m.add(p + "enorm.weight", {H});
      m.add(p + "hnorm.weight", {H});
      m.linear(p + "eh_proj", H, 2 * H);
      m.add(p + "shared_head.norm.weight", {H});
      m.linear(p + "shared_head.head", V, H);
    }
  }
  m.add("model.norm.weight", {H});
  m.linear("lm_head", V, H);
  m.add("vision_tower.patch_embed.proj.weight", {64, 3, 14, 14});
  m.linear("vision_tower.encoder.layers.0.attn.qkv", 3 * 64, 64);
  m.linear("vision_tower.encoder.layers.0.mlp.fc1", 256, 64);
  m.linear("mm_projector.linear_1", H, 64);
  m.linear("mm_projector.linear_2", H, H);
  return m;
}

inline NameList llama_names(int layers = 2) {
  constexpr std::int64_t H = 256, I = 512, V = 1000;
  NameList m;
  m.config = {{"num_hidden_layers", layers}};
  m.add("model.embed_tokens.weight", {V, H});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    m.add(p + "input_layernorm.weight", {H});
    for (const char* x : {"q_proj", "k_proj", "v_proj", "o_proj"}) m.linear(p + "self_attn." + x, H, H);
    m.add(p + "post_attention_layernorm.weight", {H});
    m.linear(p + "mlp.gate_proj", I, H);
    m.linear(p + "mlp.up_proj", I, H);
    m.linear(p + "mlp.down_proj", H, I);
  }
  m.add("model.norm.weight", {H});
  m.linear("lm_head", V, H);
  return m;
}

}  // namespace selq::recipe::testing
