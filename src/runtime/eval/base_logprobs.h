#pragma once
// The base model's next-token log-probabilities over an evaluated text, kept
// at 2 bytes per vocabulary entry (as llama.cpp keeps its --kl-divergence-base
// file) and cached on disk, so that evaluating N quantized models costs N + 1
// forward passes over the text, also across runs.
//
// Each row keeps exactly what the statistics need exactly: the log-probability
// of the token that came next and the base's top token. The full row, which KL
// needs, is quantized linearly between the row's smallest log-probability
// (floored at -40: e^-40 adds nothing a double sum can see) and 0 in 65,535
// steps, and renormalized when decoded. A model compared with itself then
// shows a KL of about step^2/24 instead of 0: at most 1.6e-8 nats.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace selq::runtime {

class BaseLogProbs {
 public:
  BaseLogProbs() = default;
  BaseLogProbs(std::int64_t rows, std::int64_t vocab);

  std::int64_t rows() const { return static_cast<std::int64_t>(heads_.size()); }
  std::int64_t vocab() const { return vocab_; }
  // `logp`: a log-softmaxed row; `target`: the token that followed.
  void set_row(std::int64_t row, const float* logp, std::int32_t target);
  // The row's log-probabilities, renormalized, into out[0, vocab).
  void decode_row(std::int64_t row, float* out) const;
  std::int32_t top(std::int64_t row) const { return heads_[static_cast<std::size_t>(row)].top; }
  float target_logp(std::int64_t row) const { return heads_[static_cast<std::size_t>(row)].target_logp; }
  std::size_t bytes() const { return heads_.size() * sizeof(RowHead) + codes_.size() * sizeof(std::uint16_t); }

  // The file format: "SELQBLP1", u64 length of a JSON header, the header
  // (`key` and the shape), then the row heads and the codes, little-endian.
  // Written under a temporary name and renamed, so a killed run leaves no
  // partial file under the final name.
  void save(const std::string& path, const std::string& key) const;
  // nullopt when the file is missing, truncated, or was written for another key.
  static std::optional<BaseLogProbs> load(const std::string& path, const std::string& key);

 private:
  struct RowHead {
    float lo{0}, step{0};  // code c stands for lo + c * step
    std::int32_t top{0};
    float target_logp{0};
  };
  static_assert(sizeof(RowHead) == 16);
  std::int64_t vocab_{0};
  std::vector<RowHead> heads_;
  std::vector<std::uint16_t> codes_;  // [rows, vocab]
};

// What a cached row set depends on: the base checkpoint's content (each
// safetensors file's content hash and config.json), the evaluated tokens and
// the window length. Hex, usable as a file name.
std::string base_logprobs_key(const std::string& base_dir, const std::vector<std::int32_t>& tokens,
                              std::int64_t context);

// $SELQ_CACHE_DIR/base-logprobs, else $XDG_CACHE_HOME/selq/base-logprobs, else
// ~/.cache/selq/base-logprobs ("" when none of them is set).
std::string default_base_logprobs_dir();

// Deletes the oldest cache files in `dir` until at most `max_bytes` remain.
void prune_base_logprobs(const std::string& dir, std::uint64_t max_bytes);

}  // namespace selq::runtime
