// Quantizing in row blocks (quant/row_blocks.h) gives the bytes and the
// metrics of the whole tensor quantized at once, for every scheme.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "core/error.h"
#include "quant/row_blocks.h"
#include "quant/scheme_traits.h"
#include "quant/scheme.h"

using namespace selq;
using namespace selq::quant;

namespace {

std::vector<std::uint8_t> bf16_gaussian(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<std::uint8_t> b(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    // Some rows far larger, so that per-tensor scales clip the others' range.
    const float v = d(rng) * ((i / 256) % 7 == 3 ? 40.0f : 1.0f);
    const std::uint16_t h = f32_to_bf16_ref(v);
    std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

struct Result {
  std::vector<std::vector<std::uint8_t>> outs;
  ErrorMetrics metrics;
};

std::vector<std::vector<std::uint8_t>> buffers(const SchemeSpec& spec, const Shape& shape) {
  std::vector<std::vector<std::uint8_t>> b;
  for (const auto& o : scheme_outputs(spec, shape)) b.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  return b;
}

Result whole(const SchemeSpec& spec, const Shape& shape, const std::vector<std::uint8_t>& data,
             TensorQuantizeOptions qo = {}) {
  const TensorInfo info{"w", DType::BF16, shape};
  Result r{buffers(spec, shape), {}};
  std::vector<std::span<std::uint8_t>> spans(r.outs.begin(), r.outs.end());
  quantize_weight(spec, TensorView{&info, data}, spans, r.metrics, qo);
  return r;
}

// Blocks of `n` units, assembled at the offsets block_outputs gives.
Result blocked(const SchemeSpec& spec, const Shape& shape, const std::vector<std::uint8_t>& data, std::int64_t n,
               TensorQuantizeOptions qo = {}) {
  const TensorInfo info{"w", DType::BF16, shape};
  const RowBlocking b = row_blocking(spec, shape);
  if (b.needs_tensor_amax && !qo.global_amax) qo.global_amax = tensor_amax(TensorView{&info, data});
  Result r{buffers(spec, shape), {}};
  std::vector<ErrorMetrics> pieces;
  const std::uint64_t unit_bytes = data.size() / static_cast<std::uint64_t>(b.units);
  for (std::int64_t u0 = 0; u0 < b.units; u0 += n) {
    const std::int64_t u1 = std::min(b.units, u0 + n);
    const TensorInfo bi{"w", DType::BF16, block_shape(shape, u1 - u0)};
    const auto ranges = block_outputs(spec, shape, u0, u1);
    std::vector<std::vector<std::uint8_t>> outs;
    for (const auto& o : ranges) outs.emplace_back(o.size);
    std::vector<std::span<std::uint8_t>> spans(outs.begin(), outs.end());
    TensorQuantizeOptions bq = qo;
    bq.pieces = &pieces;
    bq.first_element = static_cast<std::uint64_t>(u0) * (shape_numel(shape) / static_cast<std::uint64_t>(b.units));
    ErrorMetrics unused;
    quantize_weight(spec, TensorView{&bi, std::span(data).subspan(u0 * unit_bytes, (u1 - u0) * unit_bytes)}, spans,
                    unused, bq);
    EXPECT_EQ(unused.elements, 0u);
    for (std::size_t k = 0; k < ranges.size(); ++k)
      if (!ranges[k].whole || u0 == 0) std::memcpy(r.outs[k].data() + ranges[k].offset, outs[k].data(), outs[k].size());
  }
  r.metrics = merge_pieces(spec, shape, pieces);
  return r;
}

void expect_same_metrics(const ErrorMetrics& a, const ErrorMetrics& b) {
  // Exact: the blocks' pieces merge in the order the whole tensor's chunks do.
  EXPECT_EQ(a.sum_sq_ref, b.sum_sq_ref);
  EXPECT_EQ(a.sum_sq_err, b.sum_sq_err);
  EXPECT_EQ(a.sum_dot, b.sum_dot);
  EXPECT_EQ(a.sum_sq_dq, b.sum_sq_dq);
  EXPECT_EQ(a.max_abs_err, b.max_abs_err);
  EXPECT_EQ(a.elements, b.elements);
  EXPECT_EQ(a.clipped_elements, b.clipped_elements);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.clipped_blocks, b.clipped_blocks);
}

std::vector<SchemeSpec> schemes() {
  std::vector<SchemeSpec> v;
  for (const auto& t : all_scheme_traits()) {  // every kind, a new one included
    const SchemeKind k = t.kind;
    SchemeSpec s;
    s.kind = k;
    if (k == SchemeKind::IntGroup) {
      s.bits = 4;
      s.group_size = 128;
      s.symmetric = false;
    }
    v.push_back(s);
  }
  SchemeSpec mo;
  mo.kind = SchemeKind::NVFP4;
  mo.nvfp = NvfpConvention::ModelOpt;
  v.push_back(mo);
  SchemeSpec blk;
  blk.kind = SchemeKind::FP8Block;
  blk.block_rows = 64;
  blk.block_cols = 64;
  v.push_back(blk);
  return v;
}

}  // namespace

TEST(RowBlocks, SameBytesAndMetricsAsWholeTensor) {
  // 2-D with a partial last block (300 rows), and a 3-D expert stack.
  for (const Shape& shape : {Shape{300, 256}, Shape{5, 64, 128}}) {
    const auto data = bf16_gaussian(shape_numel(shape), 7);
    for (const auto& spec : schemes()) {
      SCOPED_TRACE(spec.name() + " " + shape_to_string(shape));
      const RowBlocking b = row_blocking(spec, shape);
      ASSERT_GT(b.align, 0);
      const Result w = whole(spec, shape, data);
      for (const std::int64_t n : {b.align, 2 * b.align}) {
        const Result r = blocked(spec, shape, data, n);
        for (std::size_t k = 0; k < w.outs.size(); ++k) EXPECT_EQ(w.outs[k], r.outs[k]) << "output " << k;
        expect_same_metrics(w.metrics, r.metrics);
      }
    }
  }
}

TEST(RowBlocks, FusedGroupAmaxGoesToEveryBlock) {
  SchemeSpec spec;
  spec.kind = SchemeKind::NVFP4;
  const Shape shape{256, 128};
  const auto data = bf16_gaussian(shape_numel(shape), 3);
  TensorQuantizeOptions qo;
  qo.global_amax = 5.0f;  // a fused group's, larger than this member's
  const Result w = whole(spec, shape, data, qo);
  const Result r = blocked(spec, shape, data, 128, qo);
  EXPECT_EQ(w.outs, r.outs);
  expect_same_metrics(w.metrics, r.metrics);
}

TEST(RowBlocks, PackedIntIsNotSplit) {
  SchemeSpec spec;
  spec.kind = SchemeKind::IntGroup;
  spec.bits = 4;
  spec.group_size = 128;
  spec.int_pack_int32 = true;
  EXPECT_EQ(row_blocking(spec, Shape{512, 256}).align, 0);
  EXPECT_THROW(block_outputs(spec, Shape{512, 256}, 0, 128), std::logic_error);
}

TEST(RowBlocks, NonFiniteWeightReportedAtItsIndexInTheTensor) {
  SchemeSpec spec;
  spec.kind = SchemeKind::FP8Channel;
  const Shape shape{256, 128};
  auto data = bf16_gaussian(shape_numel(shape), 5);
  const std::uint64_t bad = 200 * 128 + 17;  // in the second block
  const std::uint16_t nan = 0x7FC0;
  std::memcpy(&data[2 * bad], &nan, 2);
  const auto message = [&](auto&& run) {
    try {
      run();
    } catch (const Error& e) {
      return std::string(e.message());
    }
    return std::string("no error");
  };
  const std::string w = message([&] { whole(spec, shape, data); });
  EXPECT_NE(w.find("element 25617"), std::string::npos) << w;
  EXPECT_EQ(message([&] { blocked(spec, shape, data, 128); }), w);
}
