// The drivers shared by the runtime's architectures (decoder_lm.h).
#include "runtime/decoder_lm.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/model_ops.h"

namespace selq::runtime {

std::vector<float> DecoderLM::forward(std::span<const std::int32_t> tokens, bool all_logits) {
  const auto T = static_cast<std::int64_t>(tokens.size());
  if (T == 0) return {};
  const std::int64_t pos0 = cached_, total = cached_ + T;
  std::vector<float> x = embed(tokens);
  ensure_cache(total);
  position_tables(pos0, T);
  for (std::int64_t li = 0; li < layer_count(); ++li) run_layer(static_cast<std::size_t>(li), x.data(), T, pos0);
  cached_ = total;

  const std::int64_t H = hidden_size(), first = all_logits ? 0 : T - 1, rows = T - first;
  normed_.resize(static_cast<std::size_t>(rows * H));
  float* h = normed_.data();
  const float eps = final_norm_eps();
  ops::per_token(rows, [&](std::int64_t t) {
    ops::rms_norm(x.data() + (first + t) * H, final_norm_.data(), H, eps, h + t * H);
  });
  std::vector<float> logits(static_cast<std::size_t>(rows * vocab()));
  // One row (decode, last-token logits): a GEMV that reads the head once.
  matmul(head_.size() == 0 ? embed_ : head_, h, rows, logits.data());
  return logits;
}

void DecoderLM::truncate(std::int64_t n) {
  if (n < 0 || n > cached_) throw_bad_input(fmt::format("truncate({}) with {} cached positions", n, cached_));
  cached_ = n;
}

std::vector<float> DecoderLM::embed(std::span<const std::int32_t> tokens) {
  return ops::embed_tokens(embed_, vocab(), hidden_size(), tokens);
}

void DecoderLM::forward_layer(std::int64_t layer, float* hidden, std::int64_t n) {
  if (layer < 0 || layer >= layer_count()) throw_bad_input(fmt::format("layer {} of {}", layer, layer_count()));
  cached_ = 0;  // the cache now holds this sequence's keys for `layer` only
  ensure_cache(n);
  position_tables(0, n);
  run_layer(static_cast<std::size_t>(layer), hidden, n, 0);
}

}  // namespace selq::runtime
