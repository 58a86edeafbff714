// Matrix storage and the threaded products (the SIMD row kernels are in
// matrix_simd.cpp).
#include "runtime/model/matrix.h"

#include <algorithm>
#include <cstring>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>

#include "core/codecs.h"
#include "core/codecs_simd.h"
#include "runtime/model/blas.h"
#include "runtime/model/stored_weight.h"

namespace selq::runtime {
namespace {

// Weight rows per sgemm call in matmul. Fixed (not derived from the thread
// count) so that every output element comes from the same sgemm shape, hence
// the same bits, whatever the threads; 64 rows of a 576-wide BF16 weight
// convert into 147 KB of F32 that stay in L2 for the product.
constexpr std::int64_t kPanelRows = 64;

// Rows per matvec task: about 64 KiB of weights, so a task outweighs its
// scheduling cost, and a 576-row projection still splits over 2+ cores.
std::int64_t matvec_grain(const Matrix& w) {
  if (w.is_stored()) return w.stored->block_rows();  // one dequantized block per task
  const auto row_bytes = static_cast<std::int64_t>(w.is_bf16() ? 2 : 4) * std::max<std::int64_t>(w.cols, 1);
  return std::clamp<std::int64_t>(65536 / row_bytes, 4, 256);
}

}  // namespace

Matrix Matrix::from_f32(std::vector<float> values, std::int64_t rows, std::int64_t cols) {
  if (!values.empty())
    if (auto bits = exact_bf16(values)) return from_bf16(std::move(*bits), rows, cols);
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  auto owned = std::make_shared<const std::vector<float>>(std::move(values));
  m.f32 = std::span<const float>(*owned);
  m.storage = std::move(owned);
  return m;
}

Matrix Matrix::from_bf16(std::vector<std::uint16_t> bits, std::int64_t rows, std::int64_t cols) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  auto owned = std::make_shared<const std::vector<std::uint16_t>>(std::move(bits));
  m.bf16 = std::span<const std::uint16_t>(*owned);
  m.storage = std::move(owned);
  return m;
}

Matrix Matrix::from_mapped_bf16(const std::uint16_t* bits, std::int64_t rows, std::int64_t cols,
                                std::shared_ptr<const void> keep_alive) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.bf16 = std::span<const std::uint16_t>(bits, static_cast<std::size_t>(rows * cols));
  m.storage = std::move(keep_alive);
  m.mapped = true;
  return m;
}

Matrix Matrix::from_mapped_f32(const float* values, std::int64_t rows, std::int64_t cols,
                               std::shared_ptr<const void> keep_alive) {
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.f32 = std::span<const float>(values, static_cast<std::size_t>(rows * cols));
  m.storage = std::move(keep_alive);
  m.mapped = true;
  return m;
}

Matrix Matrix::from_bf16_scaled(std::vector<std::uint16_t> bits, std::vector<float> scale, std::int64_t rows,
                                std::int64_t cols) {
  Matrix m = from_bf16(std::move(bits), rows, cols);
  m.row_scale = std::move(scale);
  return m;
}

Matrix Matrix::from_stored(std::shared_ptr<const StoredWeight> weight) {
  Matrix m;
  m.rows = weight->rows();
  m.cols = weight->cols();
  m.stored = std::move(weight);
  return m;
}

std::uint64_t Matrix::bytes() const {
  if (is_stored()) return stored->stored_bytes();
  return (is_bf16() ? 2 * size() : 4 * size()) + 4 * row_scale.size();
}

void Matrix::row_f32(std::int64_t r, float* out) const {
  const auto n = static_cast<std::size_t>(cols);
  if (is_stored()) {
    const std::int64_t b = stored->block_rows(), r0 = r / b * b, r1 = std::min(r0 + b, rows);
    std::vector<float> block(static_cast<std::size_t>((r1 - r0) * cols));
    stored->rows_f32(r0, r1, block.data());
    std::copy_n(block.data() + (r - r0) * cols, n, out);
    return;
  }
  if (!is_bf16()) {
    std::copy_n(f32.data() + r * cols, n, out);
    return;
  }
  bf16_to_f32_bulk(bf16.data() + r * cols, out, n);
  if (!row_scale.empty()) {
    const float s = row_scale[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < n; ++i) out[i] *= s;
  }
}

std::vector<float> Matrix::to_f32() const {
  if (is_stored()) {
    std::vector<float> out(size());
    stored->rows_f32(0, rows, out.data());
    return out;
  }
  if (!is_bf16()) return {f32.begin(), f32.end()};
  std::vector<float> out(size());
  for (std::int64_t r = 0; r < rows; ++r) row_f32(r, out.data() + r * cols);
  return out;
}

namespace {

// A stored matrix's products: each task dequantizes one block of rows into
// this thread's buffer and runs the F32 kernels on it exactly as on a held F32
// matrix (the same rows, panels and calls), so the bits are the same.
const float* stored_block(const Matrix& w, std::int64_t r0, std::int64_t r1) {
  thread_local std::vector<float> block;
  block.resize(static_cast<std::size_t>((r1 - r0) * w.cols));
  w.stored->rows_f32(r0, r1, block.data());
  return block.data();
}

void rowwise_stored(const Matrix& w, const float* x, std::int64_t m, float* y) {
  const std::int64_t b = w.stored->block_rows();
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, (w.rows + b - 1) / b, 1),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
                      for (std::int64_t k = r.begin(); k < r.end(); ++k) {
                        const std::int64_t r0 = k * b, r1 = std::min(r0 + b, w.rows);
                        dot_rows_multi_f32(stored_block(w, r0, r1), w.cols, 0, r1 - r0, w.cols, x, m, w.rows, y + r0);
                      }
                    });
}

void matmul_stored(const Matrix& w, const float* x, std::int64_t m, float* y) {
  const std::int64_t b = w.stored->block_rows();
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, (w.rows + b - 1) / b, 1),
      [&](const tbb::blocked_range<std::int64_t>& range) {
        for (std::int64_t k = range.begin(); k < range.end(); ++k) {
          const std::int64_t r0 = k * b, r1 = std::min(r0 + b, w.rows);
          const float* rows = stored_block(w, r0, r1);
          for (std::int64_t p0 = r0; p0 < r1; p0 += kPanelRows) {  // matmul's panels, as for F32
            const std::int64_t n = std::min(kPanelRows, r1 - p0);
            blas::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                        static_cast<int>(w.cols), 1.0f, x, static_cast<int>(w.cols), rows + (p0 - r0) * w.cols,
                        static_cast<int>(w.cols), 0.0f, y + p0, static_cast<int>(w.rows));
          }
        }
      },
      tbb::simple_partitioner());
}

}  // namespace

void matvec(const Matrix& w, const float* x, float* y) { matmul_rowwise(w, x, 1, y); }

void matmul_rowwise(const Matrix& w, const float* x, std::int64_t m, float* y) {
  if (m <= 0) return;
  if (w.is_stored()) return rowwise_stored(w, x, m, y);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, w.rows, matvec_grain(w)),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
                      if (!w.is_bf16()) {
                        dot_rows_multi_f32(w.f32.data(), w.cols, r.begin(), r.end(), w.cols, x, m, w.rows, y);
                        return;
                      }
                      dot_rows_multi_bf16(w.bf16.data(), w.cols, r.begin(), r.end(), w.cols, x, m, w.rows, y);
                      if (!w.row_scale.empty())
                        for (std::int64_t t = 0; t < m; ++t)
                          for (std::int64_t i = r.begin(); i < r.end(); ++i)
                            y[t * w.rows + i] *= w.row_scale[static_cast<std::size_t>(i)];
                    });
}

void matmul(const Matrix& w, const float* x, std::int64_t m, float* y) {
  if (m <= 0) return;
  if (m == 1) return matvec(w, x, y);
  if (w.is_stored()) return matmul_stored(w, x, m, y);
  const std::int64_t panels = (w.rows + kPanelRows - 1) / kPanelRows;
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, panels, 1),
      [&](const tbb::blocked_range<std::int64_t>& range) {
        thread_local std::vector<float> panel;  // this thread's F32 copy of a BF16 panel
        for (std::int64_t p = range.begin(); p < range.end(); ++p) {
          const std::int64_t r0 = p * kPanelRows, n = std::min(kPanelRows, w.rows - r0);
          const float* b = nullptr;
          if (w.is_bf16()) {
            panel.resize(static_cast<std::size_t>(kPanelRows * w.cols));
            if (w.row_scale.empty())
              bf16_to_f32_bulk(w.bf16.data() + r0 * w.cols, panel.data(), static_cast<std::size_t>(n * w.cols));
            else
              for (std::int64_t i = 0; i < n; ++i) w.row_f32(r0 + i, panel.data() + i * w.cols);
            b = panel.data();
          } else {
            b = w.f32.data() + r0 * w.cols;
          }
          blas::sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
                      static_cast<int>(w.cols), 1.0f, x, static_cast<int>(w.cols), b, static_cast<int>(w.cols), 0.0f,
                      y + r0, static_cast<int>(w.rows));
        }
      },
      tbb::simple_partitioner());
}

}  // namespace selq::runtime
