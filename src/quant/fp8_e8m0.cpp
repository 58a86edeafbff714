// FP8 E4M3FN weights with one E8M0 (power-of-two) scale per output channel:
// X = 2^(byte-127) from the row's amax by the scale rule (E4M3: emax 8,
// 3 mantissa bits, max 448; docs/FORMAT_RULES.md §2), elements RNE(w / X) saturated to
// ±448. A power-of-two scale makes the quotient exact (no scale dtype, no
// rounding of the scale), as DeepSeek V3.1's ue8m0 scales are.
#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/rounding_mse.h"
#include "quant/row_kernel.h"

namespace selq::quant::detail {

namespace {
std::uint8_t row_scale_byte(const SchemeSpec& spec, float amax) {
  return e8m0_scale_from_amax_ref(amax, spec.scale_rule, 8, 3, 448.0f);
}
float e8m0_value(std::uint8_t b) {
  return b == 0xFF ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(1.0f, static_cast<int>(b) - 127);
}

// One row: codes into w, the row's metrics merged into m as one block;
// returns the scale byte.
std::uint8_t fp8_e8m0_row(const SchemeSpec& spec, const float* row, std::size_t n, float amax, bool finite,
                          std::uint8_t* w, ErrorMetrics& m, const float* weights) {
  std::uint8_t sb = row_scale_byte(spec, amax);
  // The scale is chosen; the kernel encodes with it, whichever rounding chose.
  if (searches_scales(spec.rounding.value) && finite) sb = mse_e4m3_e8m0_byte(row, weights, n, sb);
  ErrorMetrics rm;
  fp8_row(DType::F32, row, n, e8m0_value(sb), w, rm, finite);
  rm.clipped_blocks = rm.clipped_elements != 0;
  rm.blocks = 1;
  m.merge(rm);
  return sb;
}
}  // namespace

void quantize_fp8_e8m0(const MatrixJob& job, ErrorMetrics& metrics) {
  const SchemeSpec& spec = *job.spec;
  const std::int64_t in = job.g.in, out = job.g.out;
  const std::uint64_t base0 = static_cast<std::uint64_t>(job.e * out * in);
  std::uint8_t* wout = job.outs[0].data() + base0;
  std::uint8_t* sout = job.outs[1].data() + job.e * out;
  const float* weights = channel_weights_of(job);
  for_each_loaded_row(job, kFp8ChunkRows, metrics, [&](std::int64_t r, const float* row, float amax, bool finite,
                                                       ErrorMetrics& m) {
    sout[r] = fp8_e8m0_row(spec, row, static_cast<std::size_t>(in), amax, finite, wout + r * in, m, weights);
  });
}

void dequantize_fp8_e8m0(const SchemeSpec&, const Geometry& g, std::span<const std::span<const std::uint8_t>> outs,
                         float* dst) {
  for (std::int64_t r = 0; r < g.experts * g.out; ++r) {
    const float s = e8m0_value(outs[1][static_cast<std::size_t>(r)]);
    for (std::int64_t c = 0; c < g.in; ++c) {
      const std::int64_t i = r * g.in + c;
      dst[i] = e4m3_value(outs[0][static_cast<std::size_t>(i)]) * s;
    }
  }
}

void fp8_e8m0_row_kernel(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m) {
  out.scale_bytes[0] = fp8_e8m0_row(*p.spec, row.x, static_cast<std::size_t>(row.in), row.amax, row.finite, out.codes,
                                    m, nullptr);
}

}  // namespace selq::quant::detail
