// The runtime's weight storage and products: BF16 only when lossless, the
// SIMD row kernels and the threaded matvec/matmul against a double-precision
// loop on random data of odd sizes, and bit-identical results for 1 and 2
// threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <tbb/global_control.h>

#include "core/codecs.h"
#include "runtime/model/matrix.h"

namespace selq::runtime {
namespace {

std::vector<float> random_floats(std::mt19937& rng, std::size_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = bf16_to_f32(f32_to_bf16_ref(x));
  return v;
}

// y[t, r] = sum_c x[t, c] w[r, c] in double, and the bound on an F32 sum's
// error: cols * eps * sum |x w| (plus a tiny absolute floor).
void reference(const std::vector<float>& w, std::int64_t rows, std::int64_t cols, const std::vector<float>& x,
               std::int64_t m, std::vector<double>& y, std::vector<double>& bound) {
  y.assign(static_cast<std::size_t>(m * rows), 0.0);
  bound.assign(y.size(), 0.0);
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t r = 0; r < rows; ++r) {
      double s = 0, a = 0;
      for (std::int64_t c = 0; c < cols; ++c) {
        const double p = static_cast<double>(w[r * cols + c]) * x[t * cols + c];
        s += p;
        a += std::fabs(p);
      }
      y[t * rows + r] = s;
      bound[t * rows + r] = static_cast<double>(cols) * 6e-8 * a + 1e-30;
    }
}

TEST(Matrix, Bf16OnlyWhenLossless) {
  std::mt19937 rng(1);
  auto exact = bf16_rounded(random_floats(rng, 77));
  Matrix a = Matrix::from_f32(exact, 7, 11);
  ASSERT_TRUE(a.is_bf16());
  EXPECT_EQ(a.bytes(), 2u * 77);
  EXPECT_EQ(a.to_f32(), exact);
  auto inexact = exact;
  inexact[40] = std::nextafter(inexact[40], 10.0f);  // one value BF16 cannot hold
  Matrix b = Matrix::from_f32(inexact, 7, 11);
  ASSERT_FALSE(b.is_bf16());
  EXPECT_EQ(b.bytes(), 4u * 77);
  EXPECT_EQ(b.to_f32(), inexact);
  std::vector<float> row(11);
  a.row_f32(3, row.data());
  EXPECT_EQ(std::vector<float>(exact.begin() + 33, exact.begin() + 44), row);
}

TEST(Matrix, RowKernelsMatchDoubleLoop) {
  std::mt19937 rng(2);
  for (std::int64_t cols : {1, 3, 7, 8, 31, 33, 64, 65, 576, 1001}) {
    const std::int64_t rows = 5;
    auto wf = random_floats(rng, static_cast<std::size_t>(rows * cols));
    auto w = bf16_rounded(wf);
    std::vector<std::uint16_t> bits(w.size());
    for (std::size_t i = 0; i < w.size(); ++i) bits[i] = f32_to_bf16_ref(w[i]);
    const std::int64_t m = 6;  // four rows at a time, then two alone
    auto x = random_floats(rng, static_cast<std::size_t>(m * cols));
    std::vector<double> ref, bound, ref32, bound32;
    reference(w, rows, cols, x, m, ref, bound);
    reference(wf, rows, cols, x, m, ref32, bound32);
    std::vector<float> yb(m * rows, -1.0f), yf(m * rows, -1.0f);
    // Rows 1..4 only: row 0 must stay untouched.
    dot_rows_multi_bf16(bits.data(), cols, 1, rows, cols, x.data(), m, rows, yb.data());
    dot_rows_multi_f32(wf.data(), cols, 1, rows, cols, x.data(), m, rows, yf.data());
    for (std::int64_t t = 0; t < m; ++t) {
      EXPECT_EQ(yb[t * rows], -1.0f);
      EXPECT_EQ(yf[t * rows], -1.0f);
      for (std::int64_t r = 1; r < rows; ++r) {
        const auto i = static_cast<std::size_t>(t * rows + r);
        EXPECT_NEAR(yb[i], ref[i], bound[i]) << "bf16 cols " << cols << " x row " << t << " row " << r;
        EXPECT_NEAR(yf[i], ref32[i], bound32[i]) << "f32 cols " << cols << " x row " << t << " row " << r;
      }
    }
  }
}

// matvec (m = 1) and matmul (m > 1, several sgemm panels plus a partial one)
// for both storages, against the double loop, on 1 and 2 threads.
TEST(Matrix, ProductsMatchDoubleLoopAndAreThreadCountInvariant) {
  std::mt19937 rng(3);
  struct Size {
    std::int64_t rows, cols, m;
  };
  for (Size s : {Size{1, 1, 1}, Size{130, 37, 1}, Size{130, 37, 5}, Size{577, 96, 1}, Size{577, 96, 9},
                 Size{64, 200, 2}}) {
    for (bool as_bf16 : {true, false}) {
      auto w = random_floats(rng, static_cast<std::size_t>(s.rows * s.cols));
      if (as_bf16) w = bf16_rounded(w);
      Matrix mat = Matrix::from_f32(w, s.rows, s.cols);
      ASSERT_EQ(mat.is_bf16(), as_bf16);
      auto x = random_floats(rng, static_cast<std::size_t>(s.m * s.cols));
      std::vector<double> ref, bound;
      reference(w, s.rows, s.cols, x, s.m, ref, bound);
      std::vector<float> y1(ref.size()), y2(ref.size());
      {
        tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
        matmul(mat, x.data(), s.m, y1.data());
      }
      {
        tbb::global_control two(tbb::global_control::max_allowed_parallelism, 2);
        matmul(mat, x.data(), s.m, y2.data());
      }
      for (std::size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(y1[i], ref[i], bound[i]) << s.rows << "x" << s.cols << " m " << s.m << " bf16 " << as_bf16
                                             << " element " << i;
      EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)))
          << s.rows << "x" << s.cols << " m " << s.m << ": 1 and 2 threads differ";
    }
  }
}

}  // namespace
}  // namespace selq::runtime

namespace selq::runtime {
namespace {

// matmul_rowwise: every row has matvec's bits whatever the other rows of the
// call (speculative decoding batches prompts on this), for BF16, F32 and
// BF16 with a row scale, on 1 and 2 threads.
TEST(Matrix, RowwiseRowsAreMatvecBitForBit) {
  std::mt19937 rng(4);
  const std::int64_t rows = 131, cols = 97, m = 5;
  auto w = random_floats(rng, static_cast<std::size_t>(rows * cols));
  auto wb = bf16_rounded(w);
  std::vector<std::uint16_t> bits(wb.size());
  for (std::size_t i = 0; i < wb.size(); ++i) bits[i] = f32_to_bf16_ref(wb[i]);
  const std::vector<Matrix> mats{Matrix::from_f32(w, rows, cols), Matrix::from_f32(wb, rows, cols),
                                 Matrix::from_bf16_scaled(bits, random_floats(rng, rows), rows, cols)};
  auto x = random_floats(rng, static_cast<std::size_t>(m * cols));
  for (const Matrix& mat : mats)
    for (int threads : {1, 2}) {
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
      std::vector<float> y(static_cast<std::size_t>(m * rows)), one(static_cast<std::size_t>(rows));
      matmul_rowwise(mat, x.data(), m, y.data());
      for (std::int64_t t = 0; t < m; ++t) {
        matvec(mat, x.data() + t * cols, one.data());
        EXPECT_EQ(0, std::memcmp(one.data(), y.data() + t * rows, one.size() * sizeof(float)))
            << "row " << t << " bf16 " << mat.is_bf16() << " scaled " << !mat.row_scale.empty() << " threads "
            << threads;
      }
    }
}

}  // namespace
}  // namespace selq::runtime
