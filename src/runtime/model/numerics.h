#pragma once
// The numerics every user of a model's logits shares (eval, speculation,
// serve, calibration): one definition each, so that they agree to the bit.
#include <cstdint>

namespace selq::runtime {

// The index of the largest of v[0..n) (the first on ties): greedy decoding.
std::int32_t argmax(const float* v, std::int64_t n);
// log-softmax of one row of logits, in place (the sum in double).
void log_softmax_inplace(float* row, std::int64_t n);

}  // namespace selq::runtime
