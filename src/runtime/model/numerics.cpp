#include "runtime/model/numerics.h"

#include <algorithm>
#include <cmath>

namespace selq::runtime {

std::int32_t argmax(const float* v, std::int64_t n) {
  return static_cast<std::int32_t>(std::max_element(v, v + n) - v);
}

void log_softmax_inplace(float* row, std::int64_t n) {
  float mx = row[0];
  for (std::int64_t i = 1; i < n; ++i) mx = std::max(mx, row[i]);
  double s = 0;
  for (std::int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(row[i] - mx));
  const float lse = mx + static_cast<float>(std::log(s));
  for (std::int64_t i = 0; i < n; ++i) row[i] -= lse;
}

}  // namespace selq::runtime
