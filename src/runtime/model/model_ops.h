#pragma once
// Small steps shared by the runtime's architectures (internal to src/runtime).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "core/error.h"
#include "io/checkpoint.h"

namespace selq::runtime::ops {

inline void rms_norm(const float* x, const float* w, std::int64_t n, float eps, float* y) {
  double ss = 0;
  for (std::int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (std::int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
}

inline float silu(float a) { return a / (1.0f + std::exp(-a)); }

// Each of the T rows of scores ([T, total], query t at position pos0 + t)
// softmaxed over the positions it may see, the rest zeroed.
inline void causal_softmax(float* scores, std::int64_t T, std::int64_t total, std::int64_t pos0) {
  for (std::int64_t t = 0; t < T; ++t) {
    float* row = scores + t * total;
    const std::int64_t visible = pos0 + t + 1;
    float mx = row[0];
    for (std::int64_t j = 1; j < visible; ++j) mx = std::max(mx, row[j]);
    float sum = 0;
    for (std::int64_t j = 0; j < visible; ++j) {
      row[j] = std::exp(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
    for (std::int64_t j = 0; j < visible; ++j) row[j] *= inv;
    std::fill(row + visible, row + total, 0.0f);
  }
}

inline std::vector<float> load_vector(const io::Checkpoint& ck, const std::string& name, std::int64_t expect) {
  auto v = ck.view(name);
  auto n = shape_numel(v.info->shape);
  if (static_cast<std::int64_t>(n) != expect)
    throw_bad_input(fmt::format("{}: {} has {} elements, config implies {}", ck.dir(), name, n, expect));
  std::vector<float> out(n);
  load_floats(v.info->dtype, v.bytes.data(), 0, n, out.data());
  return out;
}

// The embedding rows of `tokens` ([tokens, hidden] row-major), each id checked against `vocab`.
template <typename Embedding>
std::vector<float> embed_tokens(const Embedding& embed, std::int64_t vocab, std::int64_t hidden,
                                std::span<const std::int32_t> tokens) {
  std::vector<float> x(tokens.size() * static_cast<std::size_t>(hidden));
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t] < 0 || tokens[t] >= vocab)
      throw_bad_input(fmt::format("token id {} outside vocabulary of {}", tokens[t], vocab));
    embed.row_f32(tokens[t], x.data() + t * static_cast<std::size_t>(hidden));
  }
  return x;
}

// fn(t) for t < n, over TBB threads when there is more than one token (each
// token's work is independent, so the result does not depend on the split).
template <typename Fn>
void per_token(std::int64_t n, const Fn& fn) {
  if (n == 1) return fn(0);
  tbb::parallel_for(std::int64_t{0}, n, [&](std::int64_t t) { fn(t); });
}

}  // namespace selq::runtime::ops
