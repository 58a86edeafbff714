// Each kind's scales as a divisor (and zero point) per block of a row, in the
// arithmetic its dequantizer uses (nvfp4.cpp, mx.cpp, int.cpp).
#include "quant/gptq_grid.h"

#include <fmt/format.h>

#include "quant/detail.h"
#include "quant/rounding_traits.h"

namespace selq::quant {

ElementGrid::ElementGrid(const SchemeSpec& spec, const Shape& shape,
                         std::span<const std::span<const std::uint8_t>> outs) {
  if (!rounding_takes(Rounding::Gptq, spec.kind) || shape.size() != 2)
    throw Error(ErrorKind::Internal, fmt::format("ElementGrid: {} of shape {}", spec.name(), shape_to_string(shape)));
  out_ = shape[0];
  in_ = shape[1];
  switch (spec.kind) {
    case SchemeKind::NVFP4: {
      block_ = 16;
      float global;
      std::memcpy(&global, outs[2].data(), 4);
      const detail::Nvfp4RowParams p{spec.nvfp == NvfpConvention::CompressedTensors, DType::F32, global};
      scale_.resize(outs[1].size());
      for (std::size_t i = 0; i < scale_.size(); ++i) scale_[i] = detail::nvfp4_effective_scale(p, outs[1][i]);
      break;
    }
    case SchemeKind::MXFP4:
    case SchemeKind::MXFP8:
      elements_ = spec.kind == SchemeKind::MXFP4 ? Elements::E2M1 : Elements::E4M3;
      block_ = 32;
      scale_.resize(outs[1].size());
      for (std::size_t i = 0; i < scale_.size(); ++i) scale_[i] = std::ldexp(1.0f, outs[1][i] - 127);
      break;
    case SchemeKind::IntChannel:
    case SchemeKind::IntGroup: {
      elements_ = Elements::Int;
      block_ = spec.kind == SchemeKind::IntChannel ? in_ : spec.group_size;
      qmin_ = -std::ldexp(1.0f, spec.bits - 1);
      qmax_ = std::ldexp(1.0f, spec.bits - 1) - 1.0f;
      const std::int64_t groups = in_ / block_;
      scale_.resize(static_cast<std::size_t>(out_ * groups));
      zero_.resize(scale_.size());
      const std::uint8_t* zps = spec.symmetric ? nullptr : outs[2].data();
      for (std::int64_t r = 0; r < out_; ++r)
        for (std::int64_t gi = 0; gi < groups; ++gi)
          detail::stored_group_qparams(spec, out_, in_, outs[1].data(), zps, 0, r, gi,
                                       scale_[static_cast<std::size_t>(r * groups + gi)],
                                       zero_[static_cast<std::size_t>(r * groups + gi)]);
      break;
    }
    default: break;  // refused above
  }
}

float ElementGrid::nearest(std::int64_t r, std::int64_t c, float v) const {
  const std::size_t k = static_cast<std::size_t>(r * (in_ / block_) + c / block_);
  const float s = scale_[k];
  switch (elements_) {
    case Elements::E2M1: return detail::kE2M1Values[detail::e2m1_code(v / s + 0.0f)] * s;
    case Elements::E4M3: return detail::e4m3_value(detail::e4m3_sat_code(v / s)) * s;
    case Elements::Int: {
      const float zp = zero_[k];
      const float q = std::clamp(std::nearbyint(v / s + zp), qmin_, qmax_);
      return (q - zp) * s;
    }
  }
  return v;
}

namespace {
SchemeSpec with_rounding(SchemeSpec spec, Rounding r) {
  spec.rounding.value = r;
  return spec;
}
// The search GPTQ's scales come from (gptq_scale_outputs).
SchemeSpec scale_search(const SchemeSpec& spec, const TensorQuantizeOptions& options) {
  return with_rounding(spec, options.channel_weights.empty() ? Rounding::Mse : Rounding::Weighted);
}
}  // namespace


std::vector<std::vector<std::uint8_t>> gptq_scale_outputs(const SchemeSpec& spec, const TensorView& original,
                                                          const TensorQuantizeOptions& options) {
  const SchemeSpec search = scale_search(spec, options);
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<std::span<std::uint8_t>> outs;
  for (const auto& o : scheme_outputs(search, original.info->shape))
    bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  for (auto& b : bufs) outs.emplace_back(b);
  ErrorMetrics unused;
  quantize_weight(search, original, outs, unused, options);
  return bufs;
}

void store_gptq_weights(const SchemeSpec& spec, const TensorView& original, const TensorView& rounded,
                        std::span<std::span<std::uint8_t>> outs, ErrorMetrics& metrics,
                        const TensorQuantizeOptions& options) {
  const std::string& name = original.info->name;
  if (spec.rounding.value != Rounding::Gptq || rounded.info->shape != original.info->shape ||
      (rounded.info->dtype != DType::F32 && rounded.info->dtype != DType::BF16))
    throw Error(ErrorKind::Internal,
                "store_gptq_weights: a gptq spec and F32 or BF16 GPTQ weights of the original's shape",
                ErrorWhere{{}, name, {}});
  TensorQuantizeOptions whole = options;
  whole.pieces = nullptr;
  ErrorMetrics unused;
  quantize_weight(scale_search(spec, options), original, outs, unused, whole);
  quantize_weight(spec, rounded, outs, unused, whole);  // keeps the scales `outs` holds
  std::vector<std::span<const std::uint8_t>> views(outs.begin(), outs.end());
  const std::vector<float> dq = dequantize_weight(spec, original.info->shape, views);
  std::vector<float> qv(dq.size());
  load_floats(rounded.info->dtype, rounded.bytes.data(), 0, qv.size(), qv.data());
  const float* q = qv.data();
  for (std::size_t i = 0; i < dq.size(); ++i)
    if (dq[i] != q[i])
      throw Error(ErrorKind::Internal,
                  fmt::format("GPTQ weight {} at element {} is not on its scales' grid (stored as {})", q[i], i, dq[i]),
                  ErrorWhere{{}, name, {}});
  // The error against the original weight: one piece per row (a tensor
  // stored in row blocks merges the same pieces in the same order).
  std::vector<float> row(static_cast<std::size_t>(original.info->shape.back()));
  metrics = {};
  for (std::size_t r = 0; r * row.size() < dq.size(); ++r) {
    ErrorMetrics m;
    detail::load_row(original.info->dtype, original.bytes.data(), r * row.size(), row.size(), row.data());
    for (std::size_t c = 0; c < row.size(); c += 256)  // block_metrics's float partials stay short
      detail::block_metrics(row.data() + c, dq.data() + r * row.size() + c, std::min<std::size_t>(256, row.size() - c),
                            m);
    m.blocks = 1;
    if (options.pieces)
      options.pieces->push_back(m);
    else
      metrics.merge(m);
  }
}

}  // namespace selq::quant
