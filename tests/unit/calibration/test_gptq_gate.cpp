// The gptq pass's rounding gate (calibration/gptq_gate.h): the output error it
// measures against a plain sum over the same rows, and the choice it makes
// (in a whole pass: test_gptq_pass.cpp).
#include <gtest/gtest.h>

#include <random>

#include "calibration/gptq_gate.h"

namespace selq::calibration {
namespace {

// Σ over explicit rows x of ‖(a − b) x‖², the quantity H = Σ x xᵀ stands for.
double error_over_rows(const std::vector<float>& a, const std::vector<float>& b, int out, int in,
                       const std::vector<std::vector<double>>& xs) {
  double s = 0;
  for (const auto& x : xs)
    for (int i = 0; i < out; ++i) {
      double y = 0;
      for (int j = 0; j < in; ++j) y += (static_cast<double>(a[i * in + j]) - b[i * in + j]) * x[j];
      s += y * y;
    }
  return s;
}

TEST(GptqGate, OutputErrorIsTheErrorOverTheRowsItsHessianSums) {
  std::mt19937 rng(7);
  std::normal_distribution<double> n01;
  const int out = 70, in = 33;  // 70 rows: a panel of 64 and a partial one
  const int rows = 300;  // a chunk of 256 input rows and a partial one
  std::vector<std::vector<double>> xs(rows, std::vector<double>(in));
  std::vector<float> x;  // the same rows as the gate reads them
  for (auto& r : xs)
    for (auto& v : r) {
      v = static_cast<float>(n01(rng));
      x.push_back(static_cast<float>(v));
    }
  std::vector<float> a(out * in), b(out * in);
  for (auto& v : a) v = static_cast<float>(n01(rng));
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = a[i] + static_cast<float>(0.1 * n01(rng));
  const double want = error_over_rows(a, b, out, in, xs);
  EXPECT_NEAR(output_error(a, b, out, in, x, rows), want, 1e-9 * want);

  // The gate keeps the candidate with less error, relative to the output's energy; a tie keeps GPTQ.
  std::vector<float> closer(a);
  for (std::size_t i = 0; i < closer.size(); ++i) closer[i] += 0.3f * (b[i] - a[i]);
  const GateChoice c1 = gate(a, b, closer, out, in, x, rows);
  EXPECT_FALSE(c1.gptq);
  EXPECT_NEAR(c1.nearest_error, 0.09 * c1.gptq_error, 1e-6 * c1.gptq_error);
  const std::vector<float> zero(a.size(), 0.0f);
  EXPECT_NEAR(c1.gptq_error, want / error_over_rows(a, zero, out, in, xs), 1e-9);
  EXPECT_TRUE(gate(a, closer, b, out, in, x, rows).gptq);
  EXPECT_TRUE(gate(a, b, b, out, in, x, rows).gptq);
}

}  // namespace
}  // namespace selq::calibration
