#pragma once
// A tiny random Llama checkpoint for the runtime tests.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/codecs.h"
#include "io/safetensors.h"

namespace selq::runtime::testing {

struct TinyLlama {
  int vocab = 64, hidden = 64, heads = 4, kv_heads = 2, head_dim = 16, inter = 128, layers = 2;
  float theta = 10000.0f, eps = 1e-5f;
  bool tied = false;
  bool qkv_bias = false;  // Qwen2's q/k/v biases
};

inline std::vector<float> random_vec(std::mt19937& rng, std::size_t n, float scale, float mean = 0) {
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Writes DIR/model.safetensors (BF16 when `bf16`) and config.json; returns the
// F32 values actually stored (BF16-rounded when bf16), by tensor name.
inline std::map<std::string, std::vector<float>> write_tiny_llama(const std::string& dir, const TinyLlama& c,
                                                                   bool bf16, std::uint32_t seed = 7) {
  std::filesystem::create_directories(dir);
  std::mt19937 rng(seed);
  std::map<std::string, std::pair<Shape, std::vector<float>>> t;
  auto add = [&](const std::string& n, Shape s, float scale, float mean = 0) {
    std::size_t numel = 1;
    for (auto d : s) numel *= static_cast<std::size_t>(d);
    t[n] = {s, random_vec(rng, numel, scale, mean)};
  };
  const int qd = c.heads * c.head_dim, kvd = c.kv_heads * c.head_dim;
  add("model.embed_tokens.weight", {c.vocab, c.hidden}, 1.0f);
  add("model.norm.weight", {c.hidden}, 0.1f, 1.0f);
  if (!c.tied) add("lm_head.weight", {c.vocab, c.hidden}, 0.2f);
  for (int i = 0; i < c.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {c.hidden}, 0.1f, 1.0f);
    add(p + "post_attention_layernorm.weight", {c.hidden}, 0.1f, 1.0f);
    add(p + "self_attn.q_proj.weight", {qd, c.hidden}, 0.2f);
    add(p + "self_attn.k_proj.weight", {kvd, c.hidden}, 0.2f);
    add(p + "self_attn.v_proj.weight", {kvd, c.hidden}, 0.2f);
    if (c.qkv_bias) {
      add(p + "self_attn.q_proj.bias", {qd}, 0.1f);
      add(p + "self_attn.k_proj.bias", {kvd}, 0.1f);
      add(p + "self_attn.v_proj.bias", {kvd}, 0.1f);
    }
    add(p + "self_attn.o_proj.weight", {c.hidden, qd}, 0.1f);
    add(p + "mlp.gate_proj.weight", {c.inter, c.hidden}, 0.2f);
    add(p + "mlp.up_proj.weight", {c.inter, c.hidden}, 0.2f);
    add(p + "mlp.down_proj.weight", {c.hidden, c.inter}, 0.1f);
  }
  std::vector<io::TensorBytes> out;
  std::map<std::string, std::vector<float>> values;
  for (auto& [name, sv] : t) {
    auto& [shape, v] = sv;
    io::TensorBytes tb;
    tb.info = {name, bf16 ? DType::BF16 : DType::F32, shape};
    if (bf16) {
      tb.bytes.resize(v.size() * 2);
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::uint16_t b = f32_to_bf16_ref(v[i]);
        std::memcpy(tb.bytes.data() + 2 * i, &b, 2);
        v[i] = bf16_to_f32(b);
      }
    } else {
      tb.bytes.resize(v.size() * 4);
      std::memcpy(tb.bytes.data(), v.data(), tb.bytes.size());
    }
    out.push_back(std::move(tb));
    values[name] = v;
  }
  io::save_safetensors(dir + "/model.safetensors", out);
  nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                        {"hidden_size", c.hidden}, {"intermediate_size", c.inter},
                        {"num_hidden_layers", c.layers}, {"num_attention_heads", c.heads},
                        {"num_key_value_heads", c.kv_heads}, {"head_dim", c.head_dim},
                        {"vocab_size", c.vocab}, {"rms_norm_eps", c.eps}, {"rope_theta", c.theta},
                        {"max_position_embeddings", 512}, {"tie_word_embeddings", c.tied},
                        {"torch_dtype", bf16 ? "bfloat16" : "float32"}};
  std::ofstream(dir + "/config.json") << cfg.dump(2);
  return values;
}

}  // namespace selq::runtime::testing
