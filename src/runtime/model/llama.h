#pragma once
// Llama-family decoder (RMSNorm, HF rotate-half RoPE, grouped-query attention
// with a KV cache, SwiGLU MLP, tied or untied head) with F32 activations and
// accumulation; weights are held as BF16 when that is exact (runtime/model/matrix.h).
// Every step runs on all TBB threads (linears over weight-row panels,
// attention over heads, norms and RoPE over tokens).
// It is the reference the quality evaluation measures with, not a server.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "runtime/model/decoder_lm.h"
#include "runtime/model/linear.h"

namespace selq::runtime {

struct LlamaConfig {
  std::int64_t hidden{0}, intermediate{0}, layers{0}, heads{0}, kv_heads{0}, head_dim{0}, vocab{0};
  std::int64_t max_positions{2048};
  float rms_eps{1e-5f};
  float rope_theta{10000.0f};
  bool tie_embeddings{false};
};
// From an HF config.json whose model_type the registry gave Llama's loader
// (runtime/model/architectures.cpp); BadInput/Unsupported naming `source` for what
// the runtime cannot run (rope_scaling, inconsistent heads).
LlamaConfig llama_config_from_json(const nlohmann::json& config, const std::string& source);

struct LlamaLayer {
  std::vector<float> attn_norm, mlp_norm;
  Linear q, k, v, o, gate, up, down;
};

class LlamaModel : public DecoderLM {
 public:
  // A checkpoint directory (config.json + safetensors), opened and its
  // model_type checked by load_model (runtime/model/architectures.cpp). Quantized
  // linears are resolved from its quantization_config.
  static std::unique_ptr<LlamaModel> load(const std::string& path);
  static std::unique_ptr<LlamaModel> load(std::shared_ptr<const io::Checkpoint> ck, const std::string& path);

  const LlamaConfig& config() const { return cfg_; }
  const std::string& model_type() const override { return model_type_; }
  const std::string& path() const override { return path_; }
  const std::string& dialect() const override { return dialect_; }
  std::int64_t vocab() const override { return cfg_.vocab; }
  std::int64_t max_positions() const override { return cfg_.max_positions; }
  int max_slots() const override { return 256; }  // a cache each, allocated as used
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  Linear* find_linear(const std::string& module) override;
  std::vector<const Linear*> linears() const override;

  std::int64_t layer_count() const override { return cfg_.layers; }
  std::int64_t hidden_size() const override { return cfg_.hidden; }
  std::vector<Linear*> layer_linears(std::int64_t layer) override;

  std::uint64_t parameters() const override;
  std::uint64_t weight_bytes() const override;
  // Stored bits per linear weight element over the seven projections of
  // every layer and an untied head, scales included (LinearLoader::stored_bits):
  // pipeline::Plan::bits_per_weight's definition, so `selq eval` and
  // `selq plan` agree on any checkpoint.
  double linear_bits_per_weight() const override;

 private:
  void ensure_cache(int slot, std::int64_t total) override;
  // cos/sin of every row's position per frequency, into rope_cos_/rope_sin_.
  void position_tables(std::span<const Segment> segments) override;
  // Layer li over x [rows, hidden], each segment through its slot's KV cache.
  void run_layer(std::size_t li, float* x, std::span<const Segment> segments) override;
  float final_norm_eps() const override { return cfg_.rms_eps; }

  std::string path_, dialect_, model_type_;
  LlamaConfig cfg_;
  std::vector<LlamaLayer> layers_;
  struct KvCache {
    std::vector<std::vector<float>> k, v;  // per layer [capacity, kv_heads*head_dim]
    std::int64_t capacity{0};
  };
  std::vector<KvCache> caches_;  // per sequence slot
  std::vector<float> inv_freq_;
  std::vector<float> rope_cos_, rope_sin_;                  // [T, head_dim / 2] of the current call
  std::vector<float> h_, q_, k_, v_, attn_, gate_, up_, tmp_;  // per-call scratch, grown as needed
};


}  // namespace selq::runtime
