// measure_weight (every scheme's error from one read, no outputs stored)
// reports exactly the metrics quantize_weight does, for every writable scheme.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "core/error.h"
#include "quant/scheme.h"

using namespace selq;
using namespace selq::quant;

namespace {

// Gaussian weights with outlier rows and columns, stored as `dtype`; row
// scales spanning 2^22, so that the double sums depend on the order in which
// the row chunks merge (the test sees a chunking unlike the kernels').
std::vector<std::uint8_t> random_weights(DType dtype, std::size_t n, std::size_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<std::uint8_t> b(dtype_nbytes(dtype, n));
  for (std::size_t i = 0; i < n; ++i) {
    const int row_exp = static_cast<int>((i / in) * 5 % 23) - 11;
    float v = std::ldexp(d(rng), row_exp) * ((i / in) % 7 == 3 ? 40.0f : 1.0f) * (i % in == 5 ? 9.0f : 1.0f);
    if (i % 97 == 0) v = 0.0f;
    if (dtype == DType::BF16) {
      const std::uint16_t h = f32_to_bf16_ref(v);
      std::memcpy(&b[2 * i], &h, 2);
    } else if (dtype == DType::F16) {
      const std::uint16_t h = f32_to_f16_ref(v);
      std::memcpy(&b[2 * i], &h, 2);
    } else {
      std::memcpy(&b[4 * i], &v, 4);
    }
  }
  return b;
}

ErrorMetrics quantized(const SchemeSpec& spec, const TensorView& src, const TensorQuantizeOptions& qo) {
  std::vector<std::vector<std::uint8_t>> storage;
  std::vector<std::span<std::uint8_t>> outs;
  for (const auto& o : scheme_outputs(spec, src.info->shape))
    outs.emplace_back(storage.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape))));
  ErrorMetrics m;
  quantize_weight(spec, src, outs, m, qo);
  return m;
}

// Bit for bit (a NaN sum from allowed non-finite weights included).
std::uint64_t bits(double v) { return std::bit_cast<std::uint64_t>(v); }

void expect_same(const ErrorMetrics& a, const ErrorMetrics& b) {
  EXPECT_EQ(bits(a.sum_sq_ref), bits(b.sum_sq_ref));
  EXPECT_EQ(bits(a.sum_sq_err), bits(b.sum_sq_err));
  EXPECT_EQ(bits(a.sum_dot), bits(b.sum_dot));
  EXPECT_EQ(bits(a.sum_sq_dq), bits(b.sum_sq_dq));
  EXPECT_EQ(bits(a.max_abs_err), bits(b.max_abs_err));
  EXPECT_EQ(a.elements, b.elements);
  EXPECT_EQ(a.clipped_elements, b.clipped_elements);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.clipped_blocks, b.clipped_blocks);
}

// The writable schemes that take `shape` (scheme_outputs throws for the
// others), with the variants dialects adapt them to: packed int, scales in
// the model dtype.
std::vector<SchemeSpec> schemes_for(const Shape& shape) {
  std::vector<SchemeSpec> all;
  for (const auto& s : writable_schemes()) {
    all.push_back(s);
    SchemeSpec v = s;
    v.int_pack_int32 = true;
    if (s.kind == SchemeKind::IntChannel || s.kind == SchemeKind::IntGroup) all.push_back(v);
    v = s;
    v.scale_dtype = DType::BF16;
    if (s.scale_dtype != DType::BF16) all.push_back(v);
  }
  std::vector<SchemeSpec> v;
  for (const auto& s : all) {
    try {
      scheme_outputs(s, shape);
      v.push_back(s);
    } catch (const Error&) {
    }
  }
  return v;
}

// All of `specs` measured at once against each quantized on its own.
void check_all(const std::vector<SchemeSpec>& specs, const TensorView& src, const TensorQuantizeOptions& qo) {
  ASSERT_FALSE(specs.empty());
  const std::vector<TensorQuantizeOptions> opts(specs.size(), qo);
  std::vector<ErrorMetrics> measured(specs.size());
  measure_weight(specs, src, opts, measured);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    SCOPED_TRACE(specs[i].name());
    const ErrorMetrics q = quantized(specs[i], src, qo);
    ASSERT_GT(q.elements, 0u);
    expect_same(measured[i], q);
  }
}

}  // namespace

TEST(MeasureWeight, SameMetricsAsQuantizeForEveryWritableScheme) {
  // A partial last chunk (300 rows), rows not a multiple of 16 elements
  // (200: one whole-row block), a 3-D expert stack; every source dtype.
  for (const Shape& shape : {Shape{300, 256}, Shape{40, 200}, Shape{3, 40, 128}}) {
    const auto specs = schemes_for(shape);
    for (const DType dtype : {DType::BF16, DType::F32, DType::F16}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " " + shape_to_string(shape));
      const auto data = random_weights(dtype, shape_numel(shape), static_cast<std::size_t>(shape.back()), 11);
      const TensorInfo info{"w", dtype, shape};
      check_all(specs, TensorView{&info, data}, {});
    }
  }
}

TEST(MeasureWeight, FusedGroupAmaxIsUsed) {
  const Shape shape{64, 256};
  const auto data = random_weights(DType::BF16, shape_numel(shape), 256, 3);
  const TensorInfo info{"w", DType::BF16, shape};
  TensorQuantizeOptions qo;
  qo.global_amax = 7.0f;  // a fused group's, larger than this member's own
  SchemeSpec ct, mo, fp8t;
  ct.kind = mo.kind = SchemeKind::NVFP4;
  mo.nvfp = NvfpConvention::ModelOpt;
  fp8t.kind = SchemeKind::FP8Tensor;
  check_all({ct, mo, fp8t}, TensorView{&info, data}, qo);
  std::vector<ErrorMetrics> own(1), given(1);
  measure_weight(std::vector<SchemeSpec>{ct}, TensorView{&info, data}, std::vector<TensorQuantizeOptions>{{}}, own);
  measure_weight(std::vector<SchemeSpec>{ct}, TensorView{&info, data}, std::vector<TensorQuantizeOptions>{qo}, given);
  EXPECT_NE(own[0].sum_sq_err, given[0].sum_sq_err);
}

TEST(MeasureWeight, NonFiniteRowsTakeTheScalarPathsToo) {
  const Shape shape{48, 256};
  auto data = random_weights(DType::BF16, shape_numel(shape), 256, 5);
  const std::uint16_t nan = 0x7FC0, inf = 0x7F80;
  std::memcpy(&data[2 * (3 * 256 + 17)], &nan, 2);
  std::memcpy(&data[2 * (20 * 256 + 200)], &inf, 2);
  const TensorInfo info{"w", DType::BF16, shape};
  const TensorView view{&info, data};
  TensorQuantizeOptions allow;
  allow.reject_non_finite = false;
  check_all(schemes_for(shape), view, allow);

  // Rejected with quantize_weight's message (the tensor and flat index):
  // one bad row, so that no thread order decides which is reported.
  std::memcpy(&data[2 * (20 * 256 + 200)], &data[0], 2);
  SchemeSpec fp8;
  const auto message = [&](auto&& run) {
    try {
      run();
    } catch (const Error& e) {
      return std::string(e.message());
    }
    return std::string("no error");
  };
  std::vector<ErrorMetrics> m(1);
  const std::string measured = message(
      [&] { measure_weight(std::vector<SchemeSpec>{fp8}, view, std::vector<TensorQuantizeOptions>{{}}, m); });
  EXPECT_NE(measured.find("element 785"), std::string::npos) << measured;
  EXPECT_EQ(measured, message([&] { quantized(fp8, view, {}); }));
}
