#pragma once
// DeepSeek-V3 family decoder (model_type deepseek_v3; kimi_k2 and deepseek_v2
// where their config is V3's), following transformers' DeepseekV3ForCausalLM:
// multi-head latent attention (q_a_proj -> q_a_layernorm -> q_b_proj, or
// q_proj when q_lora_rank is null; kv_a_proj_with_mqa -> kv_a_layernorm ->
// kv_b_proj; o_proj), RoPE on the qk_rope_head_dim part only (interleaved
// pairs when rope_interleave, the default), YaRN as the config states it with
// its attention scaling, dense MLPs in the first `first_k_dense_replace`
// layers and routed + shared experts after them (sigmoid router, top-k experts
// within the top `topk_group` of `n_group` groups chosen with
// e_score_correction_bias, weights from the uncorrected scores, normalised when
// norm_topk_prob and scaled by routed_scaling_factor). The MTP layers
// (model.layers.N for N >= num_hidden_layers) are not loaded, as transformers
// leaves them out.
//
// Every linear is a runtime::Linear from LinearLoader, so each module (each
// expert's gate/up/down) runs with its own stored scheme; the router's
// mlp.gate.weight is held as F32. The KV cache holds the compressed latent
// (kv_lora_rank + qk_rope_head_dim floats per position and layer, 576 for
// DeepSeek-V3); attention absorbs kv_b_proj into the query and the output as
// engines decode MLA, or, when kv_b_proj quantizes its activations or has a
// bias, applies it to every cached latent (the engines' prefill form).
// Routed experts stored as float 3-D stacks
// (transformers 5's mlp.experts.gate_up_proj [E, 2I, H] and down_proj
// [E, H, I]) are split into the same per-expert linears; quantized stacks are
// refused.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/checkpoint.h"
#include "runtime/model/decoder_lm.h"
#include "runtime/model/hf_config.h"
#include "runtime/model/linear.h"

namespace selq::runtime {

struct DeepseekV3Config {
  std::string model_type;
  std::int64_t hidden{0}, intermediate{0}, moe_intermediate{0}, layers{0}, heads{0}, vocab{0};
  std::int64_t max_positions{0};
  std::int64_t q_lora_rank{0};  // 0: q_proj
  std::int64_t kv_lora_rank{0}, qk_nope_dim{0}, qk_rope_dim{0}, v_dim{0};
  std::int64_t routed_experts{0}, shared_experts{0}, experts_per_token{0}, n_group{1}, topk_group{1};
  std::int64_t first_dense{0};
  bool norm_topk_prob{true};
  float routed_scaling{1.0f};
  float rms_eps{1e-6f};
  bool tie_embeddings{false};
  bool rope_interleave{true};
  RopeConfig rope;
  std::int64_t qk_dim() const { return qk_nope_dim + qk_rope_dim; }
};
// From an HF config.json (transformers 4 or 5 form). A field whose value the
// runtime does not implement (another scoring_func, topk_method, hidden_act,
// moe_layer_freq, fewer KV heads than heads, a RoPE type other than default or
// yarn) is Unsupported naming it; a missing or inconsistent one is BadInput.
DeepseekV3Config deepseek_v3_config_from_json(const nlohmann::json& config, const std::string& source);

struct DeepseekMlp {
  Linear gate, up, down;
};

struct DeepseekV3Layer {
  std::vector<float> attn_norm, mlp_norm, q_a_norm, kv_a_norm;
  Linear q, q_a, q_b, kv_a, kv_b, o;  // q when q_lora_rank is null, else q_a/q_b
  bool moe{false};
  DeepseekMlp dense;                   // !moe
  std::vector<float> router;           // [experts, hidden] F32
  std::vector<float> router_bias;      // [experts] e_score_correction_bias
  double router_stored_bits{0};        // LinearLoader::stored_bits("...mlp.gate")
  std::vector<DeepseekMlp> experts;    // routed
  DeepseekMlp shared;                  // shared experts (one MLP of n_shared * moe_intermediate)
  bool has_shared{false};
};

class DeepseekV3Model : public DecoderLM {
 public:
  // As LlamaModel::load: the checkpoint opened and its model_type checked by
  // load_model (runtime/model/architectures.cpp).
  static std::unique_ptr<DeepseekV3Model> load(const std::string& path);
  static std::unique_ptr<DeepseekV3Model> load(std::shared_ptr<const io::Checkpoint> ck, const std::string& path);

  const DeepseekV3Config& config() const { return cfg_; }
  const std::string& model_type() const override { return cfg_.model_type; }
  const std::string& path() const override { return path_; }
  const std::string& dialect() const override { return dialect_; }
  std::int64_t vocab() const override { return cfg_.vocab; }
  std::int64_t max_positions() const override { return cfg_.max_positions; }
  int max_slots() const override { return 1; }  // one latent cache: sequences one at a time
  const std::vector<DeepseekV3Layer>& layers() const { return layers_; }

  Linear* find_linear(const std::string& module) override;
  std::vector<const Linear*> linears() const override;
  std::int64_t layer_count() const override { return static_cast<std::int64_t>(layers_.size()); }
  std::int64_t hidden_size() const override { return cfg_.hidden; }
  // The layer's attention, then its dense MLP or its routed and shared experts.
  std::vector<Linear*> layer_linears(std::int64_t layer) override;

  std::uint64_t parameters() const override;
  std::uint64_t weight_bytes() const override;
  // Over every linear, the routers (mlp.gate: a linear module to the
  // planner, kept in floats here) and an untied head: Plan::bits_per_weight's
  // definition, so eval and plan agree.
  double linear_bits_per_weight() const override;

  // How many tokens each routed expert of each MoE layer received since the
  // last reset_routing_counts() ([layer][expert]; dense layers empty).
  const std::vector<std::vector<std::int64_t>>& routing_counts() const { return routed_; }
  void reset_routing_counts();

 private:
  void ensure_cache(int slot, std::int64_t total) override;
  // cos/sin (times YaRN's attention factor) of the one segment's positions, into rope_cos_/rope_sin_.
  void position_tables(std::span<const Segment> segments) override;
  // Layer li over x [T, hidden] at the one segment's positions, through its cache.
  void run_layer(std::size_t li, float* x, std::span<const Segment> segments) override;
  float final_norm_eps() const override { return cfg_.rms_eps; }
  // MLA: the queries, then the attention with kv_b_proj absorbed into the
  // per-head products, or applied to every cached latent.
  std::vector<float> queries(const DeepseekV3Layer& L, const float* h, std::int64_t T);
  void absorbed_attention(std::size_t li, const float* q, std::int64_t T, std::int64_t pos0, float* out);
  void expanded_attention(std::size_t li, const float* q, std::int64_t T, std::int64_t pos0, float* out);
  void attention(std::size_t li, const float* h, std::int64_t T, std::int64_t pos0, const float* cosv,
                 const float* sinv, float* out);
  void mlp(const DeepseekMlp& m, const float* h, std::int64_t rows, std::int64_t inter, float* y);
  void moe(std::size_t li, const float* h, std::int64_t T, float* y);

  std::string path_, dialect_;
  DeepseekV3Config cfg_;
  std::vector<DeepseekV3Layer> layers_;
  // The compressed KV cache, per layer: [capacity, kv_lora_rank] normalised
  // latents and [capacity, qk_rope_head_dim] rotated shared keys.
  std::vector<std::vector<float>> lat_cache_, rot_cache_;
  std::int64_t capacity_{0};
  RopeTables rope_;
  float attn_scale_{1.0f};
  std::vector<std::vector<std::int64_t>> routed_;
  std::unordered_map<std::string, Linear*> by_module_;  // find_linear's index (layers_ is not resized after load)
  std::vector<float> rope_cos_, rope_sin_;  // [T, qk_rope_dim / 2] of the current call
  std::vector<float> h_, tmp_, attn_;       // per-call scratch, grown as needed
};

}  // namespace selq::runtime
