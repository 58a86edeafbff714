#include "quant/row_blocks.h"

#include <stdexcept>

#include "quant/detail.h"
#include "quant/scheme_traits.h"

namespace selq::quant {

namespace {
// A per-tensor scale of a 2-D weight: every block computes the same value
// (from TensorQuantizeOptions::global_amax).
bool is_whole(const SchemeSpec& spec, const OutTensorSpec& o, bool three_d) {
  if (three_d) return false;  // one per expert, like the rows
  return o.role == OutRole::GlobalScale || (spec.kind == SchemeKind::FP8Tensor && o.role == OutRole::Scale);
}

std::uint64_t nbytes(const OutTensorSpec& o) { return dtype_nbytes(o.dtype, shape_numel(o.shape)); }
}  // namespace

RowBlocking row_blocking(const SchemeSpec& spec, const Shape& shape) {
  const detail::Geometry g = detail::geometry_for(spec, shape);
  const bool packed_int = (spec.kind == SchemeKind::IntChannel || spec.kind == SchemeKind::IntGroup) && spec.int_pack_int32;
  if (packed_int) return {};
  if (g.three_d) return {g.experts, 1, false};
  // 128 rows: a multiple of the kernels' row chunks (8 and 16); FP8 blocks
  // cover block_rows rows each.
  const std::int64_t align = spec.kind == SchemeKind::FP8Block ? spec.block_rows : 128;
  return {g.out, align, scheme_traits(spec.kind).whole_tensor_amax};
}

Shape block_shape(const Shape& shape, std::int64_t n) {
  Shape s = shape;
  s.at(0) = n;
  return s;
}

std::vector<BlockOutput> block_outputs(const SchemeSpec& spec, const Shape& shape, std::int64_t u0, std::int64_t u1) {
  const RowBlocking b = row_blocking(spec, shape);
  if (b.align == 0 || u0 < 0 || u1 <= u0 || u1 > b.units || u0 % b.align != 0 || (u1 != b.units && u1 % b.align != 0))
    throw std::logic_error("block_outputs: not a block boundary of this tensor");
  const bool three_d = shape.size() == 3;
  const auto full = scheme_outputs(spec, shape);
  const auto block = scheme_outputs(spec, block_shape(shape, u1 - u0));
  std::vector<OutTensorSpec> before;
  if (u0 > 0) before = scheme_outputs(spec, block_shape(shape, u0));
  std::vector<BlockOutput> out;
  for (std::size_t k = 0; k < full.size(); ++k) {
    if (is_whole(spec, full[k], three_d)) {
      out.push_back({0, nbytes(full[k]), true});
      continue;
    }
    const BlockOutput o{u0 > 0 ? nbytes(before[k]) : 0, nbytes(block[k]), false};
    if (o.offset + o.size > nbytes(full[k])) throw std::logic_error("block_outputs: block past its output");
    out.push_back(o);
  }
  return out;
}

ErrorMetrics merge_pieces(const SchemeSpec& spec, const Shape& shape, std::span<const ErrorMetrics> pieces) {
  ErrorMetrics total;
  for (const auto& p : pieces) total.merge(p);
  // What the FP8 per-tensor kernel adds once per 2-D tensor (a 3-D piece is
  // an expert's metrics and has it).
  if (shape.size() == 2 && spec.kind == SchemeKind::FP8Tensor) {
    total.blocks += 1;
    total.clipped_blocks += total.clipped_elements != 0;
  }
  return total;
}

}  // namespace selq::quant
