#pragma once
// Tensor metadata and non-owning views of tensor bytes.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace selq {

using Shape = std::vector<std::int64_t>;

// Product of the dimensions (1 for rank 0). Throws BadInput on overflow.
std::uint64_t shape_numel(const Shape& shape);
// Bytes occupied by `numel` elements of `dtype` (rounded up for F4/F6).
std::uint64_t dtype_nbytes(DType dtype, std::uint64_t numel);
std::string shape_to_string(const Shape& shape);  // "[7168, 8192]"

struct TensorInfo {
  std::string name;
  DType dtype{DType::F32};
  Shape shape;
  std::uint64_t nbytes() const { return dtype_nbytes(dtype, shape_numel(shape)); }
};

// A tensor's bytes in some backing store (mmap, buffer); row-major, little-endian.
struct TensorView {
  const TensorInfo* info{nullptr};
  std::span<const std::uint8_t> bytes;
};

// Reads element i of a float tensor (F32/F16/BF16/F64) as float.
float load_float_element(DType dtype, const std::uint8_t* data, std::uint64_t i);
// Converts a contiguous run of float-source elements to F32.
void load_floats(DType dtype, const std::uint8_t* data, std::uint64_t first, std::uint64_t count,
                 float* out);

}  // namespace selq
