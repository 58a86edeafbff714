#pragma once
// One signature for every scheme kind's row kernel: what measure_weight hands
// each kind for one loaded row, so that it runs the kinds side by side on one
// read of a weight without knowing any of them (quant/measure.cpp). A kind's
// row kernel is the one its quantize kernel runs, called with its codes not
// stored; its row in quant/scheme_traits.cpp names it.
#include <cstdint>

#include "quant/detail.h"
#include "quant/detail_simd.h"

namespace selq::quant::detail {

// One row of `in` elements, loaded to F32, with its maxima as a load of each
// width returns them (null when `in` is not a multiple of that width).
struct RowInput {
  const float* x{nullptr};
  std::int64_t in{0};
  const float* amax16{nullptr};  // max |x| of each 16-element block
  const float* amax32{nullptr};  // of each 32-element block
  float amax{0};                 // of the whole row
  bool finite{true};             // no NaN/Inf in the row (the SIMD paths need it)
};

// Where the kernel writes; codes may be null (measured, not stored). The scale
// buffers hold at least in/16 + 1 entries.
struct RowOutput {
  std::uint8_t* codes{nullptr};
  std::uint8_t* scale_bytes{nullptr};
  float* scales{nullptr};
  float* zero_points{nullptr};
};

// What a kind's rows need beyond the spec, set once per matrix (a 2-D weight
// or one expert of a stack) by the kind's RowPrepare; each kind fills and
// reads its own member.
struct RowParams {
  const SchemeSpec* spec{nullptr};
  Nvfp4RowParams nvfp4{};
  Fp8Params fp8{};
  IntRowParams ints{};
};

// `count` elements from flat element `first` of `src` are the matrix.
using RowPrepare = void (*)(RowParams& p, const TensorView& src, const TensorQuantizeOptions& options,
                            std::int64_t in, std::uint64_t first, std::uint64_t count);
// Quantizes one row, its error sums merged into m as the quantize kernel's
// pieces merge them.
using RowKernel = void (*)(const RowParams& p, const RowInput& row, const RowOutput& out, ErrorMetrics& m);

}  // namespace selq::quant::detail
