#pragma once
// Llama-family decoder (RMSNorm, HF rotate-half RoPE, grouped-query attention
// with a KV cache, SwiGLU MLP, tied or untied head) with F32 activations and
// accumulation; weights are held as BF16 when that is exact (runtime/matrix.h).
// Every step runs on all TBB threads (linears over weight-row panels,
// attention over heads, norms and RoPE over tokens).
// It is the reference the quality evaluation measures with, not a server.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/linear.h"

namespace selq::runtime {

struct LlamaConfig {
  std::int64_t hidden{0}, intermediate{0}, layers{0}, heads{0}, kv_heads{0}, head_dim{0}, vocab{0};
  std::int64_t max_positions{2048};
  float rms_eps{1e-5f};
  float rope_theta{10000.0f};
  bool tie_embeddings{false};
};
// From an HF config.json; BadInput/Unsupported naming `source` for what the
// runtime cannot run (non-Llama architectures, rope_scaling).
LlamaConfig llama_config_from_json(const nlohmann::json& config, const std::string& source);

struct LlamaLayer {
  std::vector<float> attn_norm, mlp_norm;
  Linear q, k, v, o, gate, up, down;
};

class LlamaModel {
 public:
  // A checkpoint directory (config.json + safetensors). Quantized linears are
  // resolved from its quantization_config.
  static std::unique_ptr<LlamaModel> load(const std::string& path);

  const LlamaConfig& config() const { return cfg_; }
  const std::string& path() const { return path_; }
  const std::string& dialect() const { return dialect_; }
  const std::vector<LlamaLayer>& layers() const { return layers_; }
  // The linear named `module` (checkpoint name), or nullptr: the planner swaps
  // in quantized weights one unit at a time.
  Linear* find_linear(const std::string& module);

  // Runs `tokens` after the cached ones (positions cached()..) and returns
  // logits [tokens.size(), vocab] row-major (only the last row when
  // `all_logits` is false).
  std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits = true);
  std::int64_t cached() const { return cached_; }
  void reset() { cached_ = 0; }
  // Forgets cached positions >= n (speculative decoding rollback).
  void truncate(std::int64_t n);

  // Called with each linear's input rows just before its matmul (calibration).
  using ActivationHook = void (*)(void* ctx, const Linear& l, const float* x, std::int64_t rows);
  void set_activation_hook(ActivationHook hook, void* ctx) { hook_ = hook; hook_ctx_ = ctx; }

  // Parameter count of the decoder weights as the runtime holds them.
  std::uint64_t parameters() const;
  // Bytes of those weights as held (BF16 or F32 each): what one decode token reads.
  std::uint64_t weight_bytes() const;
  // Stored bits per linear weight element over the seven projections of
  // every layer and an untied head, scales included (LinearLoader::stored_bits):
  // pipeline::Plan::bits_per_weight's definition, so `selq eval` and
  // `selq plan` agree on any checkpoint.
  double linear_bits_per_weight() const;

 private:
  void linear(const Linear& l, const float* x, std::int64_t rows, float* y);
  void ensure_cache(std::int64_t total);

  std::string path_, dialect_;
  LlamaConfig cfg_;
  Matrix embed_;                // [vocab, hidden]
  Matrix head_;                 // [vocab, hidden], empty when tied
  double head_stored_bits_{0};  // 0 when tied
  std::vector<float> final_norm_;
  std::vector<LlamaLayer> layers_;
  std::vector<std::vector<float>> k_cache_, v_cache_;  // per layer [capacity, kv_heads*head_dim]
  std::int64_t capacity_{0}, cached_{0};
  std::vector<float> inv_freq_;
  ActivationHook hook_{nullptr};
  void* hook_ctx_{nullptr};
};

// log-softmax of one row of logits, in place; returns nothing.
void log_softmax_inplace(float* row, std::int64_t n);

}  // namespace selq::runtime
