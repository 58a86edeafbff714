#include "calibration/gptq_gate.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "runtime/model/blas.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text

double output_error(std::span<const float> a, std::span<const float> b, std::int64_t out, std::int64_t in,
                    std::span<const float> x, std::int64_t rows) {
  constexpr std::int64_t kPanel = 64, kChunk = 256;  // output rows per task, input rows per product
  const std::int64_t panels = (out + kPanel - 1) / kPanel;
  std::vector<double> sums(static_cast<std::size_t>(panels), 0.0);
  std::vector<double> xc;
  for (std::int64_t c0 = 0; c0 < rows; c0 += kChunk) {
    const std::int64_t rc = std::min(kChunk, rows - c0);
    xc.assign(x.begin() + c0 * in, x.begin() + (c0 + rc) * in);
    tbb::parallel_for(std::int64_t{0}, panels, [&](std::int64_t p) {
      const std::int64_t r0 = p * kPanel, m = std::min(kPanel, out - r0);
      std::vector<double> d(static_cast<std::size_t>(m * in)), y(static_cast<std::size_t>(m * rc));
      for (std::int64_t i = 0; i < m * in; ++i) {
        const auto k = static_cast<std::size_t>(r0 * in + i);
        d[static_cast<std::size_t>(i)] = static_cast<double>(a[k]) - static_cast<double>(b[k]);
      }
      blas::dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(rc),
                  static_cast<int>(in), 1.0, d.data(), static_cast<int>(in), xc.data(), static_cast<int>(in), 0.0,
                  y.data(), static_cast<int>(rc));
      double s = 0;
      for (double v : y) s += v * v;
      sums[static_cast<std::size_t>(p)] += s;
    });
  }
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

GateChoice gate(std::span<const float> w, std::span<const float> gptq, std::span<const float> nearest,
                std::int64_t out, std::int64_t in, std::span<const float> x, std::int64_t rows) {
  const std::vector<float> zero(w.size(), 0.0f);
  const double energy = std::max(output_error(w, zero, out, in, x, rows), 1e-300);
  GateChoice c;
  c.gptq_error = output_error(w, gptq, out, in, x, rows) / energy;
  c.nearest_error = output_error(w, nearest, out, in, x, rows) / energy;
  c.gptq = c.gptq_error <= c.nearest_error;
  return c;
}

}  // namespace selq::calibration
