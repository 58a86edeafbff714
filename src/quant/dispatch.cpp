// Entry points: validation, per-expert dispatch, dequantization, amax.
#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "core/codecs_simd.h"
#include "quant/detail.h"
#include "quant/detail_simd.h"
#include "quant/scheme_traits.h"
#include "quant/rounding_traits.h"

namespace selq::quant {

namespace detail {

float span_amax(const TensorView& src, std::uint64_t first, std::uint64_t count) {
  constexpr std::uint64_t kChunk = 1 << 16;
  const std::int64_t nchunks = static_cast<std::int64_t>((count + kChunk - 1) / kChunk);
  std::vector<float> partial(static_cast<std::size_t>(nchunks), 0.0f);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, nchunks, 1),
                    [&](const tbb::blocked_range<std::int64_t>& r) {
                      std::vector<float> buf(kChunk);
                      for (std::int64_t c = r.begin(); c != r.end(); ++c) {
                        const std::uint64_t f = first + static_cast<std::uint64_t>(c) * kChunk;
                        const std::uint64_t n = std::min(kChunk, first + count - f);
                        load_row(src.info->dtype, src.bytes.data(), f, n, buf.data());
                        partial[static_cast<std::size_t>(c)] = amax_f32(buf.data(), n);  // NaN propagates
                      }
                    });
  float a = 0.0f;
  for (float p : partial) a = (p > a || p != p) ? p : a;
  return a;
}

}  // namespace detail

namespace {

void check_outs_sizes(const std::vector<OutTensorSpec>& specs, std::size_t n,
                      const std::function<std::size_t(std::size_t)>& size_of,
                      const std::string& name) {
  if (n != specs.size())
    throw Error(ErrorKind::Internal,
                fmt::format("scheme expects {} output buffers, got {}", specs.size(), n),
                ErrorWhere{{}, name, {}});
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t want = dtype_nbytes(specs[i].dtype, shape_numel(specs[i].shape));
    if (size_of(i) != want)
      throw Error(ErrorKind::Internal,
                  fmt::format("output buffer {} has {} bytes, expected {} for {} {}", i,
                              size_of(i), want, dtype_name(specs[i].dtype),
                              shape_to_string(specs[i].shape)),
                  ErrorWhere{{}, name, {}});
  }
}

// A rounding that needs input moments needs one finite, non-negative weight
// per input channel (per expert for a 3-D stack).
void check_channel_weights(std::span<const float> w, const detail::Geometry& g, const char* rounding,
                           const std::string& name) {
  const auto want = static_cast<std::size_t>(g.three_d ? g.experts * g.in : g.in);
  if (w.size() != want)
    throw_bad_input(fmt::format("rounding '{}' needs {} input-channel weights (each input channel's mean "
                                "squared activation, from `selq calibrate`), got {}",
                                rounding, want, w.size()),
                    ErrorWhere{{}, name, {}});
  for (std::size_t i = 0; i < w.size(); ++i)
    if (!(w[i] >= 0.0f) || !std::isfinite(w[i]))
      throw_bad_input(fmt::format("input-channel weight {} is {}: rounding '{}' needs finite, non-negative "
                                  "weights",
                                  i, w[i], rounding),
                      ErrorWhere{{}, name, {}});
}

}  // namespace

void quantize_weight(const SchemeSpec& spec, const TensorView& src,
                     std::span<std::span<std::uint8_t>> outs, ErrorMetrics& metrics,
                     const TensorQuantizeOptions& options) {
  if (src.info == nullptr) throw Error(ErrorKind::Internal, "quantize_weight: TensorView without info");
  const TensorInfo& info = *src.info;
  if (!dtype_is_float_source(info.dtype) || info.dtype == DType::F64)
    throw_unsupported(fmt::format("cannot quantize a {} tensor: source must be F32, BF16 or F16",
                                  dtype_name(info.dtype)),
                      ErrorWhere{{}, info.name, {}});
  if (src.bytes.size() != info.nbytes())
    throw_bad_input(fmt::format("tensor data is {} bytes, header says {}", src.bytes.size(),
                                info.nbytes()),
                    ErrorWhere{{}, info.name, {}});
  const auto specs = scheme_outputs(spec, info.shape);
  const detail::Geometry g = detail::geometry_for(spec, info.shape, info.name);
  check_outs_sizes(specs, outs.size(), [&](std::size_t i) { return outs[i].size(); }, info.name);
  check_rounding_supported(spec, info.name);
  // fp8-tensor's one scale is not searched (any rounding is nearest's).
  if (rounding_input(spec.rounding.value) == RoundingInput::InputMoments && spec.kind != SchemeKind::FP8Tensor)
    check_channel_weights(options.channel_weights, g, rounding_name(spec.rounding.value), info.name);
  ErrorMetrics total;
  // Pieces: a 2-D weight's row chunks (the kernel's), a 3-D one's experts.
  std::vector<ErrorMetrics>* const pieces = options.pieces;
  const auto quantize_kind = scheme_traits(spec.kind).quantize;
  for (std::int64_t e = 0; e < g.experts; ++e) {
    const detail::MatrixJob job{&spec, &src, &options, g, e, outs, g.three_d ? nullptr : pieces};
    ErrorMetrics m;
    quantize_kind(job, m);
    if (pieces && g.three_d)
      pieces->push_back(m);
    else if (!pieces)
      total.merge(m);
  }
  metrics = total;
}

std::vector<float> dequantize_weight(const SchemeSpec& spec, const Shape& shape,
                                     std::span<const std::span<const std::uint8_t>> outs) {
  std::vector<float> dst(static_cast<std::size_t>(shape_numel(shape)));
  dequantize_weight_into(spec, shape, outs, dst.data());
  return dst;
}

void dequantize_weight_into(const SchemeSpec& spec, const Shape& shape,
                            std::span<const std::span<const std::uint8_t>> outs, float* dst) {
  const auto specs = scheme_outputs(spec, shape);
  const detail::Geometry g = detail::geometry_for(spec, shape);
  check_outs_sizes(specs, outs.size(), [&](std::size_t i) { return outs[i].size(); }, {});
  scheme_traits(spec.kind).dequantize(spec, g, outs, dst);
}

float tensor_amax(const TensorView& src) {
  if (src.info == nullptr) throw Error(ErrorKind::Internal, "tensor_amax: TensorView without info");
  if (!dtype_is_float_source(src.info->dtype) || src.info->dtype == DType::F64)
    throw_unsupported(fmt::format("amax of a {} tensor: expected F32, BF16 or F16",
                                  dtype_name(src.info->dtype)),
                      ErrorWhere{{}, src.info->name, {}});
  // The fast path reads BF16/F32 in place (the same value; NaN/Inf fall back
  // to span_amax itself): the NVFP4 fused-group pre-pass calls this on every
  // q/k/v and gate/up weight.
  return detail::span_amax_fast(src, 0, shape_numel(src.info->shape));
}

}  // namespace selq::quant
