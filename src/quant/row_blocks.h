#pragma once
// Quantizing one weight in row blocks. Every scheme is row-local (expert-local
// for a 3-D stack): the rows [u0, u1) of a 2-D weight, or the experts [u0, u1)
// of a 3-D one, quantize on their own into byte ranges of the tensor's outputs,
// given the quantities that depend on the whole tensor (the NVFP4 global amax,
// the FP8 per-tensor amax) up front. The bytes are those of the whole tensor
// quantized at once, and so are the metrics, merged from the blocks' pieces.
#include <cstdint>
#include <span>
#include <vector>

#include "quant/scheme.h"

namespace selq::quant {

struct RowBlocking {
  std::int64_t units{0};  // rows of a 2-D weight, experts of a 3-D one
  // Block boundaries are multiples of this (a multiple of every kernel's row
  // chunk, so the metric pieces are the same); 0: the tensor cannot be split.
  std::int64_t align{0};
  // The block quantizer needs TensorQuantizeOptions::global_amax = tensor_amax of
  // the whole tensor (or the fused group's amax): one scale covers all rows.
  bool needs_tensor_amax{false};
};
// Remote or re-quantized sources are never split (the pipeline's choice);
// packed int schemes are not, since their zero points pack rows together
// and the stored shape is the whole tensor's.
RowBlocking row_blocking(const SchemeSpec& spec, const Shape& shape);

// The shape of a block of `n` units of a tensor of `shape`.
Shape block_shape(const Shape& shape, std::int64_t n);

// Where block [u0, u1) writes each of scheme_outputs(spec, shape): `offset`
// and `size` in bytes within that output. A whole output (a per-tensor
// scale of a 2-D weight) is repeated by every block: only the first writes it.
struct BlockOutput {
  std::uint64_t offset{0};
  std::uint64_t size{0};
  bool whole{false};
};
std::vector<BlockOutput> block_outputs(const SchemeSpec& spec, const Shape& shape, std::int64_t u0, std::int64_t u1);

// The tensor's metrics from the pieces its blocks returned (through
// TensorQuantizeOptions::pieces), in block order.
ErrorMetrics merge_pieces(const SchemeSpec& spec, const Shape& shape, std::span<const ErrorMetrics> pieces);

}  // namespace selq::quant
