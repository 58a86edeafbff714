// Error metrics: sums merged in a fixed order, ratios derived on demand.
#include <algorithm>
#include <cmath>
#include <limits>

#include "quant/scheme.h"

namespace selq::quant {

namespace {

// A NaN sum (non-finite weights allowed) as one NaN: which operand's NaN an
// addition keeps, and so its sign, depends on the SIMD target's summation order.
double canonical(double v) { return std::isnan(v) ? std::numeric_limits<double>::quiet_NaN() : v; }

}  // namespace

void ErrorMetrics::merge(const ErrorMetrics& o) {
  sum_sq_ref = canonical(sum_sq_ref + o.sum_sq_ref);
  sum_sq_err = canonical(sum_sq_err + o.sum_sq_err);
  sum_dot = canonical(sum_dot + o.sum_dot);
  sum_sq_dq = canonical(sum_sq_dq + o.sum_sq_dq);
  max_abs_err = std::max(max_abs_err, o.max_abs_err);
  elements += o.elements;
  clipped_elements += o.clipped_elements;
  blocks += o.blocks;
  clipped_blocks += o.clipped_blocks;
}

double ErrorMetrics::rel_frobenius() const {
  if (sum_sq_ref == 0.0) return sum_sq_err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(sum_sq_err / sum_sq_ref);
}

double ErrorMetrics::snr_db() const {
  if (sum_sq_err == 0.0) return std::numeric_limits<double>::infinity();
  if (sum_sq_ref == 0.0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(sum_sq_ref / sum_sq_err);
}

double ErrorMetrics::cosine() const {
  const double d = std::sqrt(sum_sq_ref) * std::sqrt(sum_sq_dq);
  if (d == 0.0) return (sum_sq_ref == 0.0 && sum_sq_dq == 0.0) ? 1.0 : 0.0;
  return sum_dot / d;
}

}  // namespace selq::quant
