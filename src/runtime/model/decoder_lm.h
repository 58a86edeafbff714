#pragma once
// The shape of every architecture the runtime runs: token embeddings, decoder
// layers through a KV cache, a final RMSNorm and the head (the embeddings when
// tied). The drivers of forward(), forward_layer() and embed() live here once;
// an architecture supplies its layers, its cache and its position tables.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "runtime/model/causal_lm.h"
#include "runtime/model/linear.h"
#include "runtime/model/matrix.h"

namespace selq::runtime {

class DecoderLM : public CausalLM {
 public:
  std::vector<float> forward(std::span<const std::int32_t> tokens, bool all_logits = true) final;
  std::int64_t cached(int slot = 0) const final { return cached_.at(static_cast<std::size_t>(slot)); }
  void reset() final { reset_slots(1); }
  void truncate(std::int64_t n, int slot = 0) final;
  void reset_slots(int n) final;
  std::vector<std::vector<float>> forward_steps(std::span<const SequenceStep> steps, bool rowwise) final;

  std::vector<float> embed(std::span<const std::int32_t> tokens) final;
  void forward_layer(std::int64_t layer, float* hidden, std::int64_t n) final;

 protected:
  // The rows of one slot's tokens within a forward pass: rows [row0, row0 +
  // rows) of the hidden states, at positions pos0.. of that slot's cache.
  struct Segment {
    int slot{0};
    std::int64_t row0{0}, rows{0}, pos0{0};
  };
  // Room in slot's cache for `total` positions.
  virtual void ensure_cache(int slot, std::int64_t total) = 0;
  // The rotary tables of every segment's positions, row by row, for the
  // run_layer calls that follow.
  virtual void position_tables(std::span<const Segment> segments) = 0;
  // Decoder layer li over x [rows of all segments, hidden] in place, each
  // segment through its slot's cache.
  virtual void run_layer(std::size_t li, float* x, std::span<const Segment> segments) = 0;
  // The final norm's epsilon (config.json rms_norm_eps).
  virtual float final_norm_eps() const = 0;
  // The only segment, for an architecture whose max_slots() is 1.
  static const Segment& single(std::span<const Segment> segments);
  // The token embeddings, the final norm and the head as every decoder
  // checkpoint names them; without lm_head.weight the head is tied to the
  // embeddings, which config.json must say (else BadInput naming `path`).
  void load_ends(const io::Checkpoint& ck, const LinearLoader& loader, std::int64_t vocab, std::int64_t hidden,
                 bool tie_embeddings, const std::string& path, const std::shared_ptr<const void>& mapping);

  Matrix embed_;                        // [vocab, hidden]
  Matrix head_;                         // [vocab, hidden], empty when tied to embed_
  double head_stored_bits_{0};          // 0 when tied
  std::vector<float> final_norm_;       // [hidden]
  std::vector<std::int64_t> cached_{0};  // positions in each slot's cache

 private:
  // The final norm and the head on the rows of x whose logits the steps ask
  // for, split per step.
  std::vector<std::vector<float>> head_logits(const std::vector<float>& x, std::span<const SequenceStep> steps,
                                              std::span<const Segment> segments, bool rowwise);

  std::vector<float> normed_;  // the final norm's rows of the current call
};

}  // namespace selq::runtime
