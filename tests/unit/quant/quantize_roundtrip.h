#pragma once
// One tensor through quantize_weight and back through dequantize_weight, for
// the rounding tests: the stored buffers, the kernel's metrics and the
// decoded values.
#include <span>
#include <vector>

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

}  // namespace selq::quant::test_util
