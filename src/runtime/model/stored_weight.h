#pragma once
// A quantized weight kept as its checkpoint stores it (read in place from the
// mapping) and dequantized a block of rows at a time where it is used, so a
// 4-bit weight costs its stored bytes instead of 4 bytes per value (the F32
// it dequantizes to). The rows are exactly the whole tensor's dequantization
// (every scheme is row-local: quant/row_blocks.h), so products are the same
// bits as from the dequantized matrix.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "quant/scheme.h"

namespace selq::runtime {

class StoredWeight {
 public:
  // nullptr when the scheme cannot be dequantized by rows (packed INT, whose
  // zero points pack rows together) or the weight is not 2-D. `outs` are the
  // scheme's output tensors in scheme_outputs order, in memory `keep_alive` holds.
  static std::shared_ptr<const StoredWeight> make(const quant::SchemeSpec& spec, const Shape& shape,
                                                  std::vector<std::span<const std::uint8_t>> outs,
                                                  std::shared_ptr<const void> keep_alive);

  std::int64_t rows() const { return shape_[0]; }
  std::int64_t cols() const { return shape_[1]; }
  // Rows per dequantization block; blocks start at multiples of it.
  std::int64_t block_rows() const { return block_rows_; }
  // Rows [r0, r1) as F32 into out[(r1 - r0) * cols]; r0 a multiple of
  // block_rows(), r1 one too or rows().
  void rows_f32(std::int64_t r0, std::int64_t r1, float* out) const;
  std::uint64_t stored_bytes() const;

 private:
  quant::SchemeSpec spec_;
  Shape shape_;
  std::vector<std::span<const std::uint8_t>> outs_;
  std::shared_ptr<const void> keep_alive_;
  std::int64_t block_rows_{0};
};

}  // namespace selq::runtime
