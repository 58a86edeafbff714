// GPTQ of one linear (calibration/gptq.h) on random layers: kept scales store
// exactly what mse stores when the values are already on its grid; with a
// diagonal Hessian no error moves, so GPTQ is mse's rounding; with correlated
// inputs it lowers the output error tr((W−Q) H (W−Q)ᵀ) well below mse's; the
// result does not depend on the thread count; an indefinite Hessian is one
// line naming the tensor. (The column-by-column algorithm itself is checked
// against a NumPy implementation in tests/python/test_gptq.py.)
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include "calibration/gptq.h"
#include "core/error.h"
#include "quant/gptq_grid.h"

namespace selq::calibration {
namespace {

using quant::SchemeKind;
using quant::SchemeSpec;

std::vector<SchemeSpec> gptq_specs() {
  std::vector<SchemeSpec> v;
  for (SchemeKind k : {SchemeKind::NVFP4, SchemeKind::MXFP4, SchemeKind::MXFP8}) {
    SchemeSpec s;
    s.kind = k;
    v.push_back(s);
  }
  SchemeSpec modelopt;
  modelopt.kind = SchemeKind::NVFP4;
  modelopt.nvfp = quant::NvfpConvention::ModelOpt;
  v.push_back(modelopt);
  for (bool sym : {true, false})
    for (bool packed : {false, true}) {
      SchemeSpec s;
      s.kind = SchemeKind::IntGroup;
      s.bits = 4;
      s.group_size = 64;
      s.symmetric = sym;
      s.int_pack_int32 = packed;
      s.scale_dtype = DType::BF16;
      v.push_back(s);
    }
  SchemeSpec channel;
  channel.kind = SchemeKind::IntChannel;
  channel.bits = 8;
  v.push_back(channel);
  for (auto& s : v) s.rounding.value = quant::Rounding::Gptq;
  return v;
}

struct Layer {
  std::int64_t out, in;
  std::vector<float> w;
  std::vector<double> h;
  TensorInfo info;
  TensorView view() const { return {&info, {reinterpret_cast<const std::uint8_t*>(w.data()), w.size() * 4}}; }
};

// Heavy-tailed weights and inputs with a few shared directions (what makes
// GPTQ's error feedback pay): H = XᵀX over `tokens` rows.
Layer random_layer(std::uint32_t seed, std::int64_t out, std::int64_t in, bool correlated) {
  std::mt19937 rng(seed);
  std::student_t_distribution<float> heavy(4.0f);
  std::normal_distribution<double> n01;
  Layer l{out, in, std::vector<float>(static_cast<std::size_t>(out * in)), std::vector<double>(static_cast<std::size_t>(in * in)),
          TensorInfo{"model.layers.0.mlp.down_proj.weight", DType::F32, {out, in}}};
  for (auto& x : l.w) x = 0.02f * heavy(rng);
  const std::int64_t tokens = 4 * in, factors = 8;
  std::vector<double> basis(static_cast<std::size_t>(factors * in));
  for (auto& b : basis) b = n01(rng);
  std::vector<double> x(static_cast<std::size_t>(in));
  for (std::int64_t t = 0; t < tokens; ++t) {
    for (auto& v : x) v = n01(rng);
    if (correlated)
      for (std::int64_t f = 0; f < factors; ++f) {
        const double a = 3.0 * n01(rng);
        for (std::int64_t c = 0; c < in; ++c) x[static_cast<std::size_t>(c)] += a * basis[static_cast<std::size_t>(f * in + c)];
      }
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t j = 0; j < in; ++j)
        l.h[static_cast<std::size_t>(i * in + j)] += x[static_cast<std::size_t>(i)] * x[static_cast<std::size_t>(j)];
  }
  if (!correlated)  // a diagonal Hessian: only its diagonal
    for (std::int64_t i = 0; i < in; ++i)
      for (std::int64_t j = 0; j < in; ++j)
        if (i != j) l.h[static_cast<std::size_t>(i * in + j)] = 0.0;
  return l;
}

// tr((W − Q) H (W − Q)ᵀ): the output error over the calibration rows.
double output_error(const Layer& l, const std::vector<float>& q) {
  double total = 0;
  std::vector<double> d(static_cast<std::size_t>(l.in));
  for (std::int64_t r = 0; r < l.out; ++r) {
    for (std::int64_t c = 0; c < l.in; ++c)
      d[static_cast<std::size_t>(c)] = double(l.w[static_cast<std::size_t>(r * l.in + c)]) - q[static_cast<std::size_t>(r * l.in + c)];
    for (std::int64_t i = 0; i < l.in; ++i) {
      double s = 0;
      for (std::int64_t j = 0; j < l.in; ++j) s += l.h[static_cast<std::size_t>(i * l.in + j)] * d[static_cast<std::size_t>(j)];
      total += d[static_cast<std::size_t>(i)] * s;
    }
  }
  return total;
}

// The scale search GPTQ keeps: `weighted` with the Hessian's diagonal.
struct SearchOptions {
  std::vector<float> diagonal;
  quant::TensorQuantizeOptions options;
  explicit SearchOptions(const Layer& l) : diagonal(hessian_diagonal(l.h, l.in)) { options.channel_weights = diagonal; }
};

// The values the scale search alone stores (mse's, or weighted's with `o`).
std::vector<float> mse_values(const SchemeSpec& spec, const Layer& l, const quant::TensorQuantizeOptions& o = {}) {
  const auto outs = quant::gptq_scale_outputs(spec, l.view(), o);
  const std::vector<std::span<const std::uint8_t>> views(outs.begin(), outs.end());
  return quant::dequantize_weight(spec, l.info.shape, views);
}

// Stores GPTQ's values through the kernels' kept scales; returns the bytes.
std::vector<std::vector<std::uint8_t>> stored(const SchemeSpec& spec, const Layer& l, const std::vector<float>& q,
                                              const quant::TensorQuantizeOptions& o = {}) {
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<std::span<std::uint8_t>> spans;
  for (const auto& o : quant::scheme_outputs(spec, l.info.shape)) bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  for (auto& b : bufs) spans.emplace_back(b);
  const TensorInfo qi{l.info.name, DType::F32, l.info.shape};
  quant::ErrorMetrics m;
  quant::store_gptq_weights(spec, l.view(), {&qi, {reinterpret_cast<const std::uint8_t*>(q.data()), q.size() * 4}}, spans, m, o);
  EXPECT_EQ(m.elements, q.size());
  return bufs;
}

// The scales byte for byte, the values exactly (a code may differ in the
// sign of a zero: mse's -0.0 quotient of a small negative is stored 0x8).
TEST(Gptq, KeptScalesStoreMseValuesForValuesOnItsGrid) {
  const Layer l = random_layer(1, 48, 256, true);
  for (const SchemeSpec& spec : gptq_specs()) {
    SCOPED_TRACE(spec.name());
    const auto want = quant::gptq_scale_outputs(spec, l.view());
    const std::vector<float> values = mse_values(spec, l);
    const auto got = stored(spec, l, values);
    for (std::size_t k = 1; k < got.size(); ++k) EXPECT_EQ(got[k], want[k]) << "output " << k;
    const std::vector<std::span<const std::uint8_t>> views(got.begin(), got.end());
    EXPECT_EQ(quant::dequantize_weight(spec, l.info.shape, views), values);
  }
}

// ... the search's rounding itself: `weighted` by the diagonal, or `mse`.
TEST(Gptq, DiagonalHessianIsTheScaleSearchsRounding) {
  const Layer l = random_layer(2, 40, 192, false);
  const SearchOptions weighted(l);
  GptqOptions mse;
  mse.scales_from_diagonal = false;
  for (const SchemeSpec& spec : gptq_specs()) {
    SCOPED_TRACE(spec.name());
    EXPECT_EQ(gptq_round(spec, l.view(), l.h).weight, mse_values(spec, l, weighted.options));
    EXPECT_EQ(gptq_round(spec, l.view(), l.h, mse).weight, mse_values(spec, l));
  }
}

// with_nearest: the original rounded to nearest on GPTQ's grid is, exactly, what
// the scale search alone stores (the gate's candidate, calibration/gptq_gate.h).
TEST(Gptq, NearestOnItsGridIsWhatTheScaleSearchStores) {
  const Layer l = random_layer(3, 40, 192, true);
  const SearchOptions weighted(l);
  GptqOptions o;
  o.with_nearest = true;
  for (const SchemeSpec& spec : gptq_specs()) {
    SCOPED_TRACE(spec.name());
    const GptqResult r = gptq_round(spec, l.view(), l.h, o);
    EXPECT_EQ(r.nearest, mse_values(spec, l, weighted.options));
    EXPECT_EQ(r.weight, gptq_round(spec, l.view(), l.h).weight);  // the rounding itself unchanged
  }
  EXPECT_TRUE(gptq_round(gptq_specs().front(), l.view(), l.h).nearest.empty());
}

TEST(Gptq, CorrelatedInputsLowerTheOutputError) {
  const Layer l = random_layer(3, 64, 384, true);
  for (const SchemeSpec& spec : gptq_specs()) {
    SCOPED_TRACE(spec.name());
    const GptqResult r = gptq_round(spec, l.view(), l.h);
    const SearchOptions search(l);
    const double gptq = output_error(l, r.weight), mse = output_error(l, mse_values(spec, l)),
                 weighted = output_error(l, mse_values(spec, l, search.options));
    EXPECT_LT(gptq, 0.7 * mse);
    EXPECT_LT(gptq, 0.7 * weighted);
    stored(spec, l, r.weight, search.options);  // on the grid of its scales: stores without error
  }
}

TEST(Gptq, SameResultForAnyThreadCount) {
  const Layer l = random_layer(4, 200, 320, true);
  SchemeSpec spec = gptq_specs().front();
  std::vector<float> one, two;
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
    one = gptq_round(spec, l.view(), l.h).weight;
  }
  {
    tbb::global_control c(tbb::global_control::max_allowed_parallelism, 2);
    two = gptq_round(spec, l.view(), l.h).weight;
  }
  EXPECT_EQ(one, two);
}

// The inverse's factorizations run on a fixed number of OpenBLAS threads
// (OpenBLAS rounds differently for 1, 2 or 3 of them): a run on 1, 3 or 8
// threads gives the same bits.
TEST(Gptq, InverseIsTheSameForAnyThreadCount) {
  const std::int64_t n = 1536;  // large enough for OpenBLAS's threaded path
  std::mt19937 rng(5);
  std::normal_distribution<double> n01;
  std::vector<double> basis(8 * n), h(static_cast<std::size_t>(n * n));
  for (auto& b : basis) b = n01(rng);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double v = i == j ? 1.0 + std::abs(n01(rng)) : 0.0;
      for (int f = 0; f < 8; ++f) v += basis[static_cast<std::size_t>(f * n + i)] * basis[static_cast<std::size_t>(f * n + j)];
      h[static_cast<std::size_t>(i * n + j)] = v;
    }
  GptqInverse one, three, eight;
  tbb::task_arena(1).execute([&] { one = gptq_inverse(h, n, 0.01, "w"); });
  tbb::task_arena(3).execute([&] { three = gptq_inverse(h, n, 0.01, "w"); });
  tbb::task_arena(8).execute([&] { eight = gptq_inverse(h, n, 0.01, "w"); });  // whatever the machine's cores
  EXPECT_EQ(one.perm, eight.perm);
  EXPECT_EQ(one.u, three.u);
  EXPECT_EQ(one.u, eight.u);
}

// A tensor the writer stores in row blocks (a small memory budget): the same
// bytes and, merged from the per-row pieces, the same metrics as whole.
TEST(Gptq, StoredInRowBlocksAsWhole) {
  const Layer l = random_layer(7, 96, 256, true);
  for (const SchemeSpec& spec : gptq_specs()) {
    SCOPED_TRACE(spec.name());
    const std::vector<float> q = gptq_round(spec, l.view(), l.h).weight;
    const SearchOptions search(l);
    const auto whole = stored(spec, l, q, search.options);
    quant::TensorQuantizeOptions whole_opts = search.options;
    whole_opts.global_amax = quant::tensor_amax(l.view());
    quant::ErrorMetrics whole_metrics;
    {
      std::vector<std::vector<std::uint8_t>> bufs;
      std::vector<std::span<std::uint8_t>> spans;
      for (const auto& o : quant::scheme_outputs(spec, l.info.shape)) bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
      for (auto& b : bufs) spans.emplace_back(b);
      const TensorInfo qi{l.info.name, DType::F32, l.info.shape};
      quant::store_gptq_weights(spec, l.view(), {&qi, {reinterpret_cast<const std::uint8_t*>(q.data()), q.size() * 4}},
                                spans, whole_metrics, whole_opts);
      EXPECT_EQ(bufs, whole);
    }
    std::vector<quant::ErrorMetrics> pieces;
    std::vector<std::vector<std::uint8_t>> joined(whole.size());
    for (std::int64_t r0 : {std::int64_t{0}, std::int64_t{32}}) {
      const std::int64_t rows = r0 == 0 ? 32 : l.out - 32;
      const TensorInfo bi{l.info.name, DType::F32, {rows, l.in}}, qi{l.info.name, DType::F32, {rows, l.in}};
      const auto bytes = [&](const std::vector<float>& v) {
        return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(v.data() + r0 * l.in),
                                             static_cast<std::size_t>(rows * l.in * 4));
      };
      std::vector<std::vector<std::uint8_t>> bufs;
      std::vector<std::span<std::uint8_t>> spans;
      for (const auto& o : quant::scheme_outputs(spec, bi.shape)) bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
      for (auto& b : bufs) spans.emplace_back(b);
      quant::TensorQuantizeOptions o = whole_opts;
      o.pieces = &pieces;
      quant::ErrorMetrics unused;
      quant::store_gptq_weights(spec, {&bi, bytes(l.w)}, {&qi, bytes(q)}, spans, unused, o);
      for (std::size_t k = 0; k < bufs.size(); ++k)
        if (spec.kind != SchemeKind::NVFP4 || k != 2 || r0 == 0)  // the one global scale, once
          joined[k].insert(joined[k].end(), bufs[k].begin(), bufs[k].end());
    }
    const auto roles = quant::scheme_outputs(spec, l.info.shape);
    for (std::size_t k = 0; k < whole.size(); ++k)
      if (roles[k].role != quant::OutRole::WeightShape) {  // the block's own shape
        EXPECT_EQ(joined[k], whole[k]) << "output " << k;
      }
    quant::ErrorMetrics merged;
    for (const auto& p : pieces) merged.merge(p);
    EXPECT_EQ(merged.sum_sq_err, whole_metrics.sum_sq_err);
    EXPECT_EQ(merged.sum_sq_ref, whole_metrics.sum_sq_ref);
    EXPECT_EQ(pieces.size(), static_cast<std::size_t>(l.out));
  }
}

TEST(Gptq, IndefiniteHessianIsOneLineNamingTheTensor) {
  Layer l = random_layer(5, 16, 64, false);
  std::fill(l.h.begin(), l.h.end(), 0.0);
  for (std::int64_t i = 0; i < l.in; ++i) l.h[static_cast<std::size_t>(i * l.in + i)] = 1.0;
  l.h[1] = l.h[static_cast<std::size_t>(l.in)] = 1e6;  // [[1, 1e6], [1e6, 1]]: no dampening makes it definite
  try {
    gptq_round(gptq_specs().front(), l.view(), l.h);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("down_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("positive definite"), std::string::npos) << e.what();
  }
}

TEST(Gptq, Fp8SchemesAreRefusedInOneLine) {
  const Layer l = random_layer(6, 16, 64, false);
  SchemeSpec fp8;
  fp8.kind = SchemeKind::FP8Channel;
  fp8.rounding.value = quant::Rounding::Gptq;
  try {
    gptq_round(fp8, l.view(), l.h);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rounding: mse"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace selq::calibration
