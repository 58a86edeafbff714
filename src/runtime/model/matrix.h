#pragma once
// Weight matrices of the reference runtime and their products with F32
// activations. A matrix is stored as BF16 when every value is exactly a BF16
// value (an unquantized BF16 checkpoint; MXFP4's E2M1 x power-of-two), so
// decode reads half the bytes and nothing changes; otherwise as F32 (FP8 or
// NVFP4 values times an F32 scale are not always BF16), except that an FP8
// weight is held as its E4M3 values in BF16 (exact) times an F32 scale per
// row, the two factors of the stored checkpoint. An unquantized BF16 weight of
// a local checkpoint is not copied: the matrix reads the checkpoint's read-only
// mapping, so its pages are the page cache's (shared, dropped and re-read under
// memory pressure) and a model larger than RAM still runs, slower. A quantized
// weight that dequantizes to F32 can be held as stored instead
// (runtime/model/stored_weight.h: 4-bit weights at their stored size), dequantized
// a block of rows at a time in the products, with the same results. Products accumulate
// in F32 and run on every TBB thread; each output element is computed by the
// same instructions in the same order whatever the thread count, so results
// are bit-identical for 1, 2 or N threads.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace selq::runtime {

class StoredWeight;

struct Matrix {
  std::int64_t rows{0}, cols{0};        // row-major [rows, cols]
  std::span<const std::uint16_t> bf16;  // BF16 bits, when every value is exactly BF16 (in `storage`)
  std::span<const float> f32;           // otherwise (in `storage`)
  std::vector<float> row_scale;         // with bf16 only: value[r, c] = bf16[r, c] * row_scale[r]
  std::shared_ptr<const void> storage;  // what holds bf16's or f32's values: its own vector, or a file's mapping
  bool mapped{false};                   // the values are in a file's mapping (page cache), not anonymous memory
  std::shared_ptr<const StoredWeight> stored;  // or: the quantized weight as stored, dequantized where used

  // BF16 when that loses nothing, else F32 (`values` moved in).
  static Matrix from_f32(std::vector<float> values, std::int64_t rows, std::int64_t cols);
  static Matrix from_bf16(std::vector<std::uint16_t> bits, std::int64_t rows, std::int64_t cols);
  static Matrix from_bf16_scaled(std::vector<std::uint16_t> bits, std::vector<float> row_scale, std::int64_t rows,
                                 std::int64_t cols);
  // BF16 bits (F32 values) read in place from a mapping that `keep_alive` holds open.
  static Matrix from_mapped_bf16(const std::uint16_t* bits, std::int64_t rows, std::int64_t cols,
                                 std::shared_ptr<const void> keep_alive);
  static Matrix from_mapped_f32(const float* values, std::int64_t rows, std::int64_t cols,
                                std::shared_ptr<const void> keep_alive);
  static Matrix from_stored(std::shared_ptr<const StoredWeight> weight);

  bool is_bf16() const { return !bf16.empty(); }
  bool is_stored() const { return stored != nullptr; }
  std::uint64_t size() const { return static_cast<std::uint64_t>(rows) * static_cast<std::uint64_t>(cols); }
  // Bytes of the values as held: BF16, F32, or the stored tensors.
  std::uint64_t bytes() const;
  // The bytes held in anonymous memory (a mapped or stored matrix's live in the page cache).
  std::uint64_t resident_bytes() const { return mapped || is_stored() ? 4 * row_scale.size() : bytes(); }
  // Row r as F32 into out[cols] (with a row scale: the one F32 product
  // bf16 * scale, the value the checkpoint's dequantization gives).
  void row_f32(std::int64_t r, float* out) const;
  std::vector<float> to_f32() const;
};

// y[r] = sum_c W[r, c] * x[c] for every row (decode: one token). With a row
// scale: (sum_c bf16[r, c] * x[c]) * row_scale[r], as an FP8 engine does.
void matvec(const Matrix& w, const float* x, float* y);
// y[t, r] = sum_c x[t, c] * W[r, c] for t < m (prefill), y row-major [m, rows].
// m == 1 is matvec. Panels of weight rows (converted to F32 when BF16) are
// multiplied with sgemm, one panel per task.
void matmul(const Matrix& w, const float* x, std::int64_t m, float* y);
// matmul with every output row computed exactly as matvec computes it (each
// weight row read once and dotted with all m rows, no sgemm), so a row's bits
// do not depend on the other rows of the call: speculative decoding batches
// the tokens of many prompts through it (runtime/eval/eval.cpp).
void matmul_rowwise(const Matrix& w, const float* x, std::int64_t m, float* y);

// The SIMD kernels behind matvec and matmul_rowwise (runtime-dispatched with
// Highway), for the tests: rows [r0, r1) of a [*, cols] matrix with leading
// dimension ld against m activation rows, y row-major [m, ldy].
void dot_rows_multi_bf16(const std::uint16_t* w, std::int64_t ld, std::int64_t r0, std::int64_t r1,
                         std::int64_t cols, const float* x, std::int64_t m, std::int64_t ldy, float* y);
void dot_rows_multi_f32(const float* w, std::int64_t ld, std::int64_t r0, std::int64_t r1, std::int64_t cols,
                        const float* x, std::int64_t m, std::int64_t ldy, float* y);
// Name of the Highway target the kernels dispatch to ("AVX2").
const char* matrix_simd_target();

}  // namespace selq::runtime
