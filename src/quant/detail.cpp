// Shared helpers for the scheme implementations.
#include <fmt/format.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <array>

#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"

namespace selq::quant::detail {

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<std::size_t>(i)] = e4m3_to_f32(static_cast<std::uint8_t>(i));
    return t;
  }();
  return table.data();
}

void store_float(DType t, std::uint8_t* base, std::uint64_t idx, float v) {
  switch (t) {
    case DType::BF16: {
      const std::uint16_t b = f32_to_bf16_ref(v);
      std::memcpy(base + 2 * idx, &b, 2);
      return;
    }
    case DType::F16: {
      const std::uint16_t h = f32_to_f16_ref(v);
      std::memcpy(base + 2 * idx, &h, 2);
      return;
    }
    case DType::F32: std::memcpy(base + 4 * idx, &v, 4); return;
    default: throw_unsupported(fmt::format("scale dtype {} is not F32, BF16 or F16", dtype_name(t)));
  }
}

void require_scale_dtype(DType t) {
  if (t != DType::BF16 && t != DType::F16 && t != DType::F32)
    throw_unsupported(fmt::format("scale dtype {} is not F32, BF16 or F16", dtype_name(t)));
}

void load_row(DType t, const std::uint8_t* data, std::uint64_t first, std::uint64_t count,
              float* out) {
  switch (t) {
    case DType::F32: std::memcpy(out, data + 4 * first, 4 * count); return;
    case DType::BF16:
      if (reinterpret_cast<std::uintptr_t>(data) % 2 == 0) {
        bf16_to_f32_bulk(reinterpret_cast<const std::uint16_t*>(data) + first, out, count);
        return;
      }
      for (std::uint64_t k = 0; k < count; ++k) {
        std::uint16_t b;
        std::memcpy(&b, data + 2 * (first + k), 2);
        out[k] = std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
      }
      return;
    default: load_floats(t, data, first, count, out); return;
  }
}

const float* load_row_block_amax(DType t, const std::uint8_t* data, std::uint64_t first,
                                 std::size_t n, std::size_t bw, float* buf, float* amax) {
  if (t == DType::BF16 && reinterpret_cast<std::uintptr_t>(data + 2 * first) % 2 == 0) {
    load_bf16_block_amax_simd(reinterpret_cast<const std::uint16_t*>(data + 2 * first), n, bw, buf,
                              amax);
    return buf;
  }
  const float* row = buf;
  if (t == DType::F32 && reinterpret_cast<std::uintptr_t>(data + 4 * first) % alignof(float) == 0)
    row = reinterpret_cast<const float*>(data + 4 * first);  // read in place, no copy
  else
    load_row(t, data, first, n, buf);
  block_amax_simd(row, n, bw, amax);
  return row;
}

float span_amax_fast(const TensorView& src, std::uint64_t first, std::uint64_t count) {
  const DType t = src.info->dtype;
  const std::uint8_t* data = src.bytes.data();
  const bool bf16 = t == DType::BF16 && reinterpret_cast<std::uintptr_t>(data) % 2 == 0;
  const bool f32 = t == DType::F32 && reinterpret_cast<std::uintptr_t>(data) % alignof(float) == 0;
  if (!bf16 && !f32) return span_amax(src, first, count);
  constexpr std::uint64_t kChunk = 1 << 18;
  const std::int64_t nchunks = static_cast<std::int64_t>((count + kChunk - 1) / kChunk);
  std::vector<float> partial(static_cast<std::size_t>(nchunks), 0.0f);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, nchunks, 1), [&](const auto& r) {
    for (std::int64_t c = r.begin(); c != r.end(); ++c) {
      const std::uint64_t f = first + static_cast<std::uint64_t>(c) * kChunk;
      const std::uint64_t n = std::min(kChunk, first + count - f);
      float a;
      if (bf16)
        a = amax_bf16(reinterpret_cast<const std::uint16_t*>(data) + f, n);
      else
        a = amax_f32(reinterpret_cast<const float*>(data) + f, n);
      partial[static_cast<std::size_t>(c)] = a;
    }
  });
  float a = 0.0f;
  for (float p : partial) {
    if (!(p <= 3.40282347e38f)) return span_amax(src, first, count);  // NaN/Inf: its exact result
    a = std::max(a, p);
  }
  return a;
}

void check_finite(const float* v, std::size_t n, std::uint64_t base, const TensorView& src,
                  const TensorQuantizeOptions& options) {
  if (!options.reject_non_finite) return;
  // A branch-free exponent test first (vectorizes): the common all-finite
  // row costs one cheap pass.
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i)
    bad |= static_cast<std::uint32_t>((std::bit_cast<std::uint32_t>(v[i]) & 0x7F800000u) == 0x7F800000u);
  if (bad == 0) return;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i])) {
      const std::string name = src.info ? src.info->name : std::string();
      throw_bad_input(fmt::format("non-finite weight {} at element {} (flat index); refusing to quantize",
                                  v[i], options.first_element + base + i),
                      ErrorWhere{{}, name, {}}, ErrorHint::AllowNonFinite);
    }
  }
}

}  // namespace selq::quant::detail
