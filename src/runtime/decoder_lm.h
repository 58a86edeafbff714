#pragma once
// The shape of every architecture the runtime runs: token embeddings, decoder
// layers through a KV cache, a final RMSNorm and the head (the embeddings when
// tied). The drivers of forward(), forward_layer() and embed() live here once;
// an architecture supplies its layers, its cache and its position tables.
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/causal_lm.h"
#include "runtime/matrix.h"

namespace selq::runtime {

class DecoderLM : public CausalLM {
 public:
  std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits = true) final;
  std::int64_t cached() const final { return cached_; }
  void reset() final { cached_ = 0; }
  void truncate(std::int64_t n) final;

  std::vector<float> embed(std::span<const std::int32_t> tokens) final;
  void forward_layer(std::int64_t layer, float* hidden, std::int64_t n) final;

 protected:
  // Room in the cache for `total` positions.
  virtual void ensure_cache(std::int64_t total) = 0;
  // The rotary tables of positions pos0..pos0+T-1, for the run_layer calls that follow.
  virtual void position_tables(std::int64_t pos0, std::int64_t T) = 0;
  // Decoder layer li over x [T, hidden] in place, at positions pos0.., through its cache.
  virtual void run_layer(std::size_t li, float* x, std::int64_t T, std::int64_t pos0) = 0;
  // The final norm's epsilon (config.json rms_norm_eps).
  virtual float final_norm_eps() const = 0;

  Matrix embed_;                   // [vocab, hidden]
  Matrix head_;                    // [vocab, hidden], empty when tied to embed_
  std::vector<float> final_norm_;  // [hidden]
  std::int64_t cached_{0};         // positions in the cache

 private:
  std::vector<float> normed_;  // the final norm's rows of the current call
};

}  // namespace selq::runtime
