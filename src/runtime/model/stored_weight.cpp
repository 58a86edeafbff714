#include "runtime/model/stored_weight.h"

#include <numeric>

#include "quant/row_blocks.h"

namespace selq::runtime {

std::shared_ptr<const StoredWeight> StoredWeight::make(const quant::SchemeSpec& spec, const Shape& shape,
                                                       std::vector<std::span<const std::uint8_t>> outs,
                                                       std::shared_ptr<const void> keep_alive) {
  if (shape.size() != 2) return nullptr;
  const quant::RowBlocking b = quant::row_blocking(spec, shape);
  if (b.align == 0) return nullptr;
  auto w = std::make_shared<StoredWeight>();
  w->spec_ = spec;
  w->shape_ = shape;
  w->outs_ = std::move(outs);
  w->keep_alive_ = std::move(keep_alive);
  w->block_rows_ = std::lcm(b.align, std::int64_t{128});  // also a multiple of matmul's 64-row panels
  return w;
}

void StoredWeight::rows_f32(std::int64_t r0, std::int64_t r1, float* out) const {
  if (r0 == 0 && r1 == rows()) return quant::dequantize_weight_into(spec_, shape_, outs_, out);
  const auto blocks = quant::block_outputs(spec_, shape_, r0, r1);
  std::vector<std::span<const std::uint8_t>> part(outs_.size());
  for (std::size_t k = 0; k < outs_.size(); ++k) part[k] = outs_[k].subspan(blocks[k].offset, blocks[k].size);
  quant::dequantize_weight_into(spec_, quant::block_shape(shape_, r1 - r0), part, out);
}

std::uint64_t StoredWeight::stored_bytes() const {
  std::uint64_t n = 0;
  for (const auto& o : outs_) n += o.size();
  return n;
}

}  // namespace selq::runtime
