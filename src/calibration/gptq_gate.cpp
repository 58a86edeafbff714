#include "calibration/gptq_gate.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "runtime/model/blas.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text

double output_error(std::span<const float> a, std::span<const float> b, std::int64_t out, std::int64_t in,
                    std::span<const double> h) {
  constexpr std::int64_t kPanel = 64;
  const std::int64_t panels = (out + kPanel - 1) / kPanel;
  std::vector<double> sums(static_cast<std::size_t>(panels), 0.0);
  tbb::parallel_for(std::int64_t{0}, panels, [&](std::int64_t p) {
    const std::int64_t r0 = p * kPanel, rows = std::min(kPanel, out - r0);
    std::vector<double> d(static_cast<std::size_t>(rows * in)), dh(d.size());
    for (std::int64_t i = 0; i < rows * in; ++i) {
      const auto k = static_cast<std::size_t>(r0 * in + i);
      d[static_cast<std::size_t>(i)] = static_cast<double>(a[k]) - static_cast<double>(b[k]);
    }
    blas::dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(in),
                static_cast<int>(in), 1.0, d.data(), static_cast<int>(in), h.data(), static_cast<int>(in), 0.0,
                dh.data(), static_cast<int>(in));
    double s = 0;
    for (std::size_t i = 0; i < d.size(); ++i) s += d[i] * dh[i];
    sums[static_cast<std::size_t>(p)] = s;
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

GateChoice gate(std::span<const float> w, std::span<const float> gptq, std::span<const float> nearest,
                std::int64_t out, std::int64_t in, std::span<const double> h) {
  const std::vector<float> zero(w.size(), 0.0f);
  const double energy = std::max(output_error(w, zero, out, in, h), 1e-300);
  GateChoice c;
  c.gptq_error = output_error(w, gptq, out, in, h) / energy;
  c.nearest_error = output_error(w, nearest, out, in, h) / energy;
  c.gptq = c.gptq_error <= c.nearest_error;
  return c;
}

}  // namespace selq::calibration
