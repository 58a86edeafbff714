#include "core/tensor.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "core/codecs.h"
#include "core/codecs_simd.h"
#include "core/error.h"

namespace selq {

std::uint64_t shape_numel(const Shape& shape) {
  std::uint64_t n = 1;
  for (auto d : shape) {
    if (d < 0) throw_bad_input(fmt::format("negative dimension {} in shape", d));
    if (d != 0 && n > UINT64_MAX / static_cast<std::uint64_t>(d))
      throw_bad_input("shape element count overflows 64 bits");
    n *= static_cast<std::uint64_t>(d);
  }
  return n;
}

std::uint64_t dtype_nbytes(DType dtype, std::uint64_t numel) {
  const std::uint64_t bits = static_cast<std::uint64_t>(dtype_bits(dtype));
  if (numel > UINT64_MAX / bits) throw_bad_input("tensor size in bits overflows 64 bits");
  return (numel * bits + 7) / 8;
}

std::string shape_to_string(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

float load_float_element(DType dtype, const std::uint8_t* data, std::uint64_t i) {
  switch (dtype) {
    case DType::F32: {
      float f;
      std::memcpy(&f, data + 4 * i, 4);
      return f;
    }
    case DType::BF16: {
      std::uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case DType::F16: {
      std::uint16_t h;
      std::memcpy(&h, data + 2 * i, 2);
      return f16_to_f32(h);
    }
    case DType::F64: {
      double d;
      std::memcpy(&d, data + 8 * i, 8);
      return static_cast<float>(d);
    }
    default:
      throw_unsupported(fmt::format("dtype {} is not a float source", dtype_name(dtype)));
  }
}

void load_floats(DType dtype, const std::uint8_t* data, std::uint64_t first, std::uint64_t count,
                 float* out) {
  if (dtype == DType::F32) {
    std::memcpy(out, data + 4 * first, 4 * count);
    return;
  }
  if (dtype == DType::BF16) {  // the bulk codec is bit-exact with the scalar one (core/codecs_simd.h)
    std::uint16_t bits[1024];  // copied: `data` need not be 2-byte aligned
    for (std::uint64_t k = 0; k < count; k += 1024) {
      const std::uint64_t take = std::min<std::uint64_t>(1024, count - k);
      std::memcpy(bits, data + 2 * (first + k), 2 * take);
      bf16_to_f32_bulk(bits, out + k, take);
    }
    return;
  }
  for (std::uint64_t k = 0; k < count; ++k) out[k] = load_float_element(dtype, data, first + k);
}

}  // namespace selq
