#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "rotation/orthogonal.h"

namespace selq::rotation {
namespace {

// max |Q Q^T - I| over the dense matrix.
double orthogonality_error(const Orthogonal& q) {
  const auto d = q.dense();
  const std::int64_t n = q.size();
  double worst = 0;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < n; ++k) s += d[i * n + k] * d[j * n + k];
      worst = std::max(worst, std::abs(s - (i == j ? 1.0 : 0.0)));
    }
  return worst;
}

TEST(Paley, ConstructionsAreHadamard) {
  // I: 12 (q 11), 20 (19), 44 (43), 60 (59); II: 28 (q 13), 36 (17), 76 (37).
  for (std::int64_t m : {12, 20, 28, 36, 44, 60, 76}) {
    std::string kind;
    const auto h = paley_hadamard(m, &kind);
    ASSERT_EQ(h.size(), static_cast<std::size_t>(m * m)) << m;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < m; ++j) {
        float s = 0;
        for (std::int64_t k = 0; k < m; ++k) {
          ASSERT_EQ(std::abs(h[i * m + k]), 1.f);
          s += h[i * m + k] * h[j * m + k];
        }
        ASSERT_EQ(s, i == j ? static_cast<float>(m) : 0.f) << kind << " " << m << " " << i << "," << j;
      }
  }
  EXPECT_TRUE(paley_hadamard(9).empty());
  EXPECT_TRUE(paley_hadamard(52).empty());  // q 51 = 3 x 17, q 25 not prime: neither construction here
}

TEST(Orthogonal, IsOrthogonalAtModelSizes) {
  // 576 (SmolLM2) = paley2(36) x 16, 1536 (Qwen2.5-1.5B) = paley1(12) x 128,
  // 64/128 (heads) pure Hadamard, 7 x 5 random, 1 the identity.
  for (std::int64_t n : {1, 2, 35, 64, 128, 192, 576, 1536}) {
    Orthogonal q(n, 3);
    EXPECT_LT(orthogonality_error(q), 2e-6) << n << " " << q.describe().dump();
  }
  EXPECT_EQ(Orthogonal(576, 0).describe()["construction"], "hadamard(16) x paley2(36) with random signs");
  EXPECT_EQ(Orthogonal(1536, 0).describe()["construction"], "hadamard(128) x paley1(12) with random signs");
  EXPECT_EQ(Orthogonal(7168, 0).describe()["construction"], "hadamard(256) x paley2(28) with random signs");
  EXPECT_EQ(Orthogonal(35, 0).describe()["construction"], "random(35) with random signs");
}

TEST(Orthogonal, SpreadsAnOutlierEvenlyWhereHadamard) {
  // One channel of magnitude 1: every channel of its rotation is 1/sqrt(n).
  for (std::int64_t n : {576, 1536, 7168}) {
    Orthogonal q(n, 11);
    std::vector<float> x(n, 0.f);
    x[5] = 1.f;
    q.apply_rows(x.data(), 1, false);
    for (float v : x) ASSERT_NEAR(std::abs(v), 1 / std::sqrt(static_cast<float>(n)), 1e-6f) << n;
  }
}

TEST(Orthogonal, TransposeUndoesAndSeedsDiffer) {
  std::mt19937 rng(1);
  std::normal_distribution<float> g;
  const std::int64_t n = 7168;
  std::vector<float> x(2 * n);
  for (auto& v : x) v = g(rng);
  auto y = x;
  Orthogonal q(n, 5);
  q.apply_rows(y.data(), 2, false);
  double moved = 0;
  for (std::size_t i = 0; i < x.size(); ++i) moved = std::max(moved, double(std::abs(y[i] - x[i])));
  EXPECT_GT(moved, 0.1);
  q.apply_rows(y.data(), 2, true);
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 2e-5) << i;
  auto a = x, b = x;
  Orthogonal(n, 5).apply_rows(a.data(), 1, false);
  Orthogonal(n, 6).apply_rows(b.data(), 1, false);
  EXPECT_NE(a, b);
}

TEST(Orthogonal, SegmentsAreABlockDiagonal) {
  Orthogonal r(16, 2);
  std::vector<float> x(48);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3;
  auto whole = x;
  r.apply_segments(whole.data(), 1, 48, false);
  for (int k = 0; k < 3; ++k) {
    std::vector<float> seg(x.begin() + 16 * k, x.begin() + 16 * (k + 1));
    r.apply_rows(seg.data(), 1, false);
    for (int i = 0; i < 16; ++i) EXPECT_EQ(whole[16 * k + i], seg[i]);
  }
  EXPECT_THROW(r.apply_segments(x.data(), 1, 40, false), std::exception);
}

}  // namespace
}  // namespace selq::rotation
