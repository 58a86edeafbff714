#pragma once
// The runtime's model seam: one interface for a causal language model (a
// batch of tokens through a KV cache, logits, a hook on every linear's input)
// and load_model, which picks the implementation by config.json `model_type`
// (the rows of runtime/model/architectures.cpp). eval, calibrate, serve and the
// planner's runtime tiers see only this interface.
//
// Adding an architecture: a class deriving from DecoderLM (runtime/model/decoder_lm.h:
// embeddings, layers through a cache, final norm, head; or from CausalLM for
// another shape) in its own file(s) under src/runtime/, a `load` taking the
// opened checkpoint, and one row per model_type it runs in
// runtime/model/architectures.cpp (`kArchitectures`). The class routes every linear
// through CausalLM::linear so hooks see what each module reads (per expert for
// MoE layers), and refuses in one line any config field it does not implement
// (hf_config.h's helpers name it).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/linear.h"

namespace selq::runtime {

class CausalLM {
 public:
  virtual ~CausalLM();

  // config.json's model_type ("llama", "deepseek_v3", ...).
  virtual const std::string& model_type() const = 0;
  virtual const std::string& path() const = 0;
  // "compressed-tensors", "quark", "modelopt", "fp8" or "" (unquantized).
  virtual const std::string& dialect() const = 0;
  virtual std::int64_t vocab() const = 0;
  // The longest context the config states (max_position_embeddings).
  virtual std::int64_t max_positions() const = 0;

  // Runs `tokens` after the cached ones (positions cached()..) and returns
  // logits [tokens.size(), vocab] row-major (only the last row when
  // `all_logits` is false).
  virtual std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits = true) = 0;
  // Positions cached in a sequence slot (slot 0 is forward()'s sequence).
  virtual std::int64_t cached(int slot = 0) const = 0;
  // One empty sequence, in slot 0.
  virtual void reset() = 0;
  // Forgets positions >= n of a slot (speculative decoding rollback).
  virtual void truncate(std::int64_t n, int slot = 0) = 0;

  // Several sequences at once, each in a slot with its own cache:
  // speculative decoding runs a batch of prompts in lockstep (runtime/eval/eval.cpp),
  // so each weight is read once per step for all of them.
  struct SequenceStep {
    int slot{0};
    std::span<const std::int32_t> tokens;  // run after the slot's cached positions
    bool all_logits{true};                 // else the last row's logits only
  };
  // The slots the architecture can hold at once (1: one sequence at a time).
  virtual int max_slots() const = 0;
  // n empty slots, 1 <= n <= max_slots().
  virtual void reset_slots(int n) = 0;
  // One step for each of several distinct slots, in one pass through the
  // layers; each step's logits as forward() returns them. `rowwise`: every
  // product row as for that token alone (matmul_rowwise), so a step's logits
  // do not depend on the other steps of the call.
  virtual std::vector<std::vector<float>> forward_steps(std::span<const SequenceStep> steps, bool rowwise) = 0;

  // The linear named `module` (checkpoint name, no ".weight"), or nullptr:
  // the planner swaps in quantized weights one unit at a time.
  virtual Linear* find_linear(const std::string& module) = 0;
  // Every linear module the model runs, in load order.
  virtual std::vector<const Linear*> linears() const = 0;

  // Parameter count of the decoder weights as the runtime holds them.
  virtual std::uint64_t parameters() const = 0;
  // Bytes of those weights as held (BF16 or F32 each).
  virtual std::uint64_t weight_bytes() const = 0;
  // Stored bits per linear weight element over every linear module and an
  // untied head, scales included (LinearLoader::stored_bits).
  virtual double linear_bits_per_weight() const = 0;

  // Layer by layer (GPTQ, calibration/gptq_pass.h): the token embeddings of one
  // sequence [n, hidden_size()], and decoder layer `layer` run over a
  // sequence's hidden states in place (positions 0..n-1; the KV cache of
  // what forward() ran is not kept: reset() before forward() again). The
  // linears of a layer, in the order the layer runs them. An architecture
  // without them says so (Unsupported naming its model_type).
  virtual std::int64_t layer_count() const;
  virtual std::int64_t hidden_size() const;
  virtual std::vector<float> embed(std::span<const std::int32_t> tokens);
  virtual void forward_layer(std::int64_t layer, float* hidden, std::int64_t n);
  virtual std::vector<Linear*> layer_linears(std::int64_t layer);

  // Called with each linear's input rows just before its matmul (calibration;
  // a routed expert sees only the rows routed to it).
  using ActivationHook = void (*)(void* ctx, const Linear& l, const float* x, std::int64_t rows);
  void set_activation_hook(ActivationHook hook, void* ctx) {
    hook_ = hook;
    hook_ctx_ = ctx;
  }

 protected:
  // The hook alone: `l` reads these rows in a form other than its own matmul
  // (MLA's kv_b_proj absorbed into attention).
  void observe(const Linear& l, const float* x, std::int64_t rows) {
    if (hook_) hook_(hook_ctx_, l, x, rows);
  }
  // y = l(x) for `rows` rows, after the hook.
  void linear(const Linear& l, const float* x, std::int64_t rows, float* y) {
    if (hook_) hook_(hook_ctx_, l, x, rows);
    l.forward(x, rows, y, rowwise_);
  }
  bool rowwise_{false};  // the products of the current forward_steps call are rowwise

 private:
  ActivationHook hook_{nullptr};
  void* hook_ctx_{nullptr};
};

// The checkpoint directory's model, by its config.json model_type, from the
// rows of runtime/model/architectures.cpp (llama, mistral, qwen2: LlamaModel;
// deepseek_v3, kimi_k2, deepseek_v2 with V3's router: DeepseekV3Model).
// Anything else: Unsupported, naming the model_type and the ones it runs.
std::unique_ptr<CausalLM> load_model(const std::string& path);

// The model_type values load_model runs.
std::vector<std::string> runtime_model_types();

}  // namespace selq::runtime
