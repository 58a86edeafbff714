// A quantized weight held as stored and dequantized a block of rows at a time
// (runtime/model/stored_weight.h) gives the same bits as the same weight held
// dequantized, in every product and row read, for each scheme that can be
// read by rows; packed INT (zero points across rows) cannot and says so.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/scheme.h"
#include "runtime/model/matrix.h"
#include "runtime/model/stored_weight.h"

namespace selq::runtime {
namespace {

using quant::SchemeKind;
using quant::SchemeSpec;

struct Case {
  std::string name;
  SchemeSpec spec;
};

std::vector<Case> cases() {
  return {{"nvfp4", {.kind = SchemeKind::NVFP4}},
          {"mxfp4", {.kind = SchemeKind::MXFP4}},
          {"mxfp8", {.kind = SchemeKind::MXFP8}},
          {"fp8-block", {.kind = SchemeKind::FP8Block, .block_rows = 128, .block_cols = 128}},
          {"fp8-block32", {.kind = SchemeKind::FP8Block, .block_rows = 32, .block_cols = 32}},
          {"int4-g64", {.kind = SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 64}},
          {"int8-channel", {.kind = SchemeKind::IntChannel, .bits = 8}}};
}

// The stored outputs of a random [rows, cols] weight quantized with `spec`.
std::vector<std::vector<std::uint8_t>> quantize(const SchemeSpec& spec, std::int64_t rows, std::int64_t cols,
                                                std::vector<float>& w) {
  std::mt19937 rng(11);
  std::student_t_distribution<float> d(4.0f);
  w.resize(static_cast<std::size_t>(rows * cols));
  for (auto& x : w) x = 0.05f * d(rng);
  TensorInfo info{"w", DType::F32, {rows, cols}};
  TensorView view{&info, std::span(reinterpret_cast<const std::uint8_t*>(w.data()), w.size() * 4)};
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<std::span<std::uint8_t>> outs;
  for (const auto& o : quant::scheme_outputs(spec, {rows, cols})) bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  for (auto& b : bufs) outs.emplace_back(b);
  quant::ErrorMetrics m;
  quant::quantize_weight(spec, view, outs, m);
  return bufs;
}

TEST(StoredWeight, SameBitsAsTheDequantizedWeight) {
  const std::int64_t rows = 328, cols = 256;  // 328: a last block of 72 rows
  for (const auto& c : cases()) {
    SCOPED_TRACE(c.name);
    std::vector<float> w;
    const auto bufs = quantize(c.spec, rows, cols, w);
    auto keep = std::make_shared<std::vector<std::vector<std::uint8_t>>>(bufs);
    std::vector<std::span<const std::uint8_t>> outs(keep->begin(), keep->end());
    auto stored = StoredWeight::make(c.spec, {rows, cols}, outs, keep);
    ASSERT_NE(stored, nullptr);
    const Matrix s = Matrix::from_stored(stored);
    const Matrix h = Matrix::from_f32(quant::dequantize_weight(c.spec, {rows, cols}, outs), rows, cols);
    EXPECT_EQ(s.resident_bytes(), 0u);
    EXPECT_LT(s.bytes(), h.bytes());

    const std::vector<float> sf = s.to_f32(), hf = h.to_f32();
    ASSERT_EQ(0, std::memcmp(sf.data(), hf.data(), hf.size() * 4));
    std::vector<float> row_s(static_cast<std::size_t>(cols)), row_h(row_s.size());
    for (std::int64_t r : {std::int64_t{0}, std::int64_t{129}, rows - 1}) {
      s.row_f32(r, row_s.data());
      h.row_f32(r, row_h.data());
      ASSERT_EQ(0, std::memcmp(row_s.data(), row_h.data(), row_s.size() * 4)) << "row " << r;
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> nd;
    for (std::int64_t m : {std::int64_t{1}, std::int64_t{7}}) {
      std::vector<float> x(static_cast<std::size_t>(m * cols));
      for (auto& v : x) v = nd(rng);
      std::vector<float> ys(static_cast<std::size_t>(m * rows)), yh(ys.size());
      matmul(s, x.data(), m, ys.data());
      matmul(h, x.data(), m, yh.data());
      ASSERT_EQ(0, std::memcmp(ys.data(), yh.data(), ys.size() * 4)) << "tokens " << m;
    }
  }
}

TEST(StoredWeight, PackedIntCannotBeReadByRows) {
  const SchemeSpec packed{.kind = SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 64,
                          .int_pack_int32 = true};
  std::vector<float> w;
  const auto bufs = quantize(packed, 128, 128, w);
  std::vector<std::span<const std::uint8_t>> outs(bufs.begin(), bufs.end());
  EXPECT_EQ(StoredWeight::make(packed, {128, 128}, outs, nullptr), nullptr);
}

}  // namespace
}  // namespace selq::runtime
