#pragma once
// One tensor through quantize_weight and back through dequantize_weight, for
// the rounding tests: the stored buffers, the kernel's metrics and the
// decoded values; and the source bytes of float values in a dtype.
#include <cstring>
#include <span>
#include <vector>

#include "core/codecs.h"
#include "quant/scheme.h"

namespace selq::quant::test_util {

struct Quantized {
  std::vector<std::vector<std::uint8_t>> bufs;
  ErrorMetrics metrics;
  std::vector<float> dq;
};

inline Quantized quantize_roundtrip(const SchemeSpec& spec, const TensorInfo& info, std::span<const std::uint8_t> data,
                                    const TensorQuantizeOptions& options = {}) {
  Quantized q;
  for (const auto& s : scheme_outputs(spec, info.shape)) q.bufs.emplace_back(dtype_nbytes(s.dtype, shape_numel(s.shape)));
  std::vector<std::span<std::uint8_t>> spans(q.bufs.begin(), q.bufs.end());
  quantize_weight(spec, TensorView{&info, data}, spans, q.metrics, options);
  std::vector<std::span<const std::uint8_t>> cs(spans.begin(), spans.end());
  q.dq = dequantize_weight(spec, info.shape, cs);
  return q;
}

// The values as a tensor of dtype dt (F32, BF16 or F16, rounded to nearest).
inline std::vector<std::uint8_t> to_bytes(const std::vector<float>& v, DType dt) {
  std::vector<std::uint8_t> b(v.size() * dtype_nbytes(dt, 1));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(&b[4 * i], &v[i], 4);
    } else {
      const std::uint16_t h = dt == DType::BF16 ? f32_to_bf16_ref(v[i]) : f32_to_f16_ref(v[i]);
      std::memcpy(&b[2 * i], &h, 2);
    }
  }
  return b;
}

}  // namespace selq::quant::test_util
