// Rounding `weighted` (quant/rounding_mse.h): the `mse` search with each
// element's squared error weighted by its input channel's weight. Per block,
// never worse than nearest in the weighted error; with `mse`'s own weights
// the bytes are `mse`'s; on a linear whose input channels have the variances the
// weights say, the output error E‖(W − Q)x‖² is below `mse`'s; missing or bad
// weights are refused naming the tensor; a 3-D stack takes each expert's slice.
#include <gtest/gtest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>

#include "core/error.h"
#include "quant/rounding_mse.h"
#include "quant/scheme.h"
#include "quant/rounding_traits.h"
#include "quantize_roundtrip.h"

using namespace selq;
using namespace selq::quant;

namespace {

std::vector<float> gaussian(std::size_t n, unsigned seed, double scale = 0.02) {
  std::mt19937 rng(seed);
  std::student_t_distribution<double> t(4.0);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(t(rng) * scale);
  return v;
}

// Channel weights spread log-uniformly over 10^4, a few exactly zero (a
// channel no token activates).
std::vector<float> channel_weights(std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<float> w(static_cast<std::size_t>(in));
  for (auto& x : w) x = u(rng) < 0.03 ? 0.0f : static_cast<float>(std::pow(10.0, 4.0 * u(rng) - 2.0));
  return w;
}

std::vector<std::uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<std::uint8_t> b(2 * v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::uint16_t h = f32_to_bf16_ref(v[i]);
    std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

std::vector<float> bf16_loaded(const std::vector<float>& v) {
  std::vector<float> out(v);
  for (auto& x : out) x = bf16_to_f32(f32_to_bf16_ref(x));
  return out;
}

using test_util::Quantized;

Quantized run(const SchemeSpec& spec, const Shape& shape, const std::vector<std::uint8_t>& data,
              std::span<const float> weights = {}) {
  TensorQuantizeOptions o;
  o.channel_weights = weights;
  return test_util::quantize_roundtrip(spec, TensorInfo{"model.layers.0.mlp.down_proj.weight", DType::BF16, shape}, data,
                                     o);
}

SchemeSpec with(SchemeSpec s, Rounding r) {
  s.rounding.value = r;
  return s;
}

struct Case {
  std::string what;
  SchemeSpec spec;
  std::int64_t block_rows, block_cols;  // the elements a scale covers (0: whole rows)
};

std::vector<Case> cases() {
  return {
      {"mxfp4", {.kind = SchemeKind::MXFP4}, 1, 32},
      {"mxfp8", {.kind = SchemeKind::MXFP8}, 1, 32},
      {"nvfp4-ct", {.kind = SchemeKind::NVFP4}, 1, 16},
      {"nvfp4-modelopt", {.kind = SchemeKind::NVFP4, .nvfp = NvfpConvention::ModelOpt}, 1, 16},
      {"fp8-channel", {.kind = SchemeKind::FP8Channel}, 1, 0},
      {"fp8-block32", {.kind = SchemeKind::FP8Block, .block_rows = 32, .block_cols = 32}, 32, 32},
      {"fp8-channel-e8m0", {.kind = SchemeKind::FP8ChannelE8M0}, 1, 0},
      {"int4-g128", {.kind = SchemeKind::IntGroup, .bits = 4, .group_size = 128}, 1, 128},
      {"int4-g64-asym", {.kind = SchemeKind::IntGroup, .bits = 4, .symmetric = false, .group_size = 64}, 1, 64},
      {"int8-channel", {.kind = SchemeKind::IntChannel, .bits = 8}, 1, 0},
  };
}

// Σ w_c (x − dq)² of each block, in double, element order within the block.
std::vector<double> block_wsse(const std::vector<float>& x, const std::vector<float>& dq, const std::vector<float>& w,
                               std::int64_t rows, std::int64_t in, std::int64_t br, std::int64_t bc) {
  if (bc == 0) bc = in;
  const std::int64_t nbc = (in + bc - 1) / bc;
  std::vector<double> out(static_cast<std::size_t>(((rows + br - 1) / br) * nbc), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < in; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * in + c);
      const double e = static_cast<double>(x[i]) - static_cast<double>(dq[i]);
      out[static_cast<std::size_t>((r / br) * nbc + c / bc)] += e * e * static_cast<double>(w[static_cast<std::size_t>(c)]);
    }
  return out;
}

// E4M3 elements under a power-of-two scale: the neighbouring exponents move
// the same relative grid (only saturation and subnormals differ), so neither
// search finds a better block on these weights (`mse` neither: x1.000).
bool pow2_scaled_fp8(const SchemeSpec& s) {
  return s.kind == SchemeKind::MXFP8 || s.kind == SchemeKind::FP8ChannelE8M0;
}

double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}

}  // namespace

// Every kind is among the cases but FP8 per tensor, whose one scale for the
// whole tensor is not searched (= nearest).
TEST(RoundingWeighted, CasesCoverEveryKindThatSearches) {
  std::set<SchemeKind> kinds;
  for (const Case& k : cases()) kinds.insert(k.spec.kind);
  EXPECT_FALSE(kinds.count(SchemeKind::FP8Tensor));
  EXPECT_EQ(kinds.size(), kSchemeKindCount - 1);
}

TEST(RoundingWeighted, NeverWorseThanNearestInTheWeightedErrorAndBelowMse) {
  constexpr std::int64_t rows = 64, in = 256;
  for (const Case& k : cases()) {
    double nearest = 0, mse = 0, weighted = 0;
    for (unsigned seed = 1; seed <= 4; ++seed) {
      SCOPED_TRACE(::testing::Message() << k.what << " seed " << seed);
      const auto x = gaussian(static_cast<std::size_t>(rows * in), seed * 31u);
      const auto w = channel_weights(in, seed);
      const auto bytes = bf16_bytes(x);
      const auto xs = bf16_loaded(x);
      const auto en = block_wsse(xs, run(k.spec, {rows, in}, bytes).dq, w, rows, in, k.block_rows, k.block_cols);
      const auto em = block_wsse(xs, run(with(k.spec, Rounding::Mse), {rows, in}, bytes).dq, w, rows, in,
                                 k.block_rows, k.block_cols);
      const auto ew = block_wsse(xs, run(with(k.spec, Rounding::Weighted), {rows, in}, bytes, w).dq, w, rows, in,
                                 k.block_rows, k.block_cols);
      // The search's own measure (element-order double sums; the FP8 2-D
      // block sums its row segments in the same order), so exact.
      for (std::size_t b = 0; b < en.size(); ++b) ASSERT_LE(ew[b], en[b]) << "block " << b;
      nearest += total(en);
      mse += total(em);
      weighted += total(ew);
    }
    std::printf("%-16s weighted error: mse x%.3f, weighted x%.3f of nearest\n", k.what.c_str(), mse / nearest,
                weighted / nearest);
    EXPECT_LE(weighted, mse) << k.what;
    if (!pow2_scaled_fp8(k.spec)) {
      EXPECT_LT(weighted, nearest) << k.what;
      EXPECT_LT(weighted, mse) << k.what;  // what the weights buy over the unweighted search
    }
  }
}

// `mse` is `weighted` with the weights it takes itself: all 1, or on 4-bit
// INT and MXFP4 the magnitude weights (quant/rounding_mse.h). A one-row
// tensor's channel weights are per element, so the two must give the same bytes;
// but on MXFP4 `mse` also leaves out the finer exponent e − 1 (rounding_mse.cpp),
// so there each block's byte is weighted's where weighted kept e or e + 1, and
// never below nearest's.
TEST(RoundingWeighted, MseIsWeightedWithItsOwnWeights) {
  constexpr std::int64_t in = 512;
  for (unsigned seed = 7; seed < 10; ++seed) {
    const auto x = gaussian(in, seed);
    const auto bytes = bf16_bytes(x);
    const auto xs = bf16_loaded(x);
    for (const Case& k : cases()) {
      std::vector<float> own(in, 1.0f);
      if (detail::mse_weighs_magnitude(k.spec))
        detail::magnitude_weights(xs.data(), in, static_cast<std::size_t>(k.block_cols ? k.block_cols : in),
                                  own.data());
      const auto weighted = run(with(k.spec, Rounding::Weighted), {1, in}, bytes, own).bufs;
      const auto mse = run(with(k.spec, Rounding::Mse), {1, in}, bytes).bufs;
      if (k.spec.kind != SchemeKind::MXFP4) {
        EXPECT_EQ(weighted, mse) << k.what << " seed " << seed;
        continue;
      }
      const auto nearest = run(k.spec, {1, in}, bytes).bufs;
      ASSERT_EQ(mse.size(), 2u);  // codes, E8M0 scale bytes
      for (std::size_t b = 0; b < mse[1].size(); ++b) {
        EXPECT_GE(mse[1][b], nearest[1][b]) << k.what << " seed " << seed << " block " << b;
        if (weighted[1][b] >= nearest[1][b]) {
          EXPECT_EQ(mse[1][b], weighted[1][b]) << k.what << " block " << b;
        }
      }
    }
  }
}

// On a linear y = W x whose input channels are independent with variances v,
// E‖(W − Q) x‖² = Σ_rows Σ_c v_c (W − Q)²_rc: weighting by v is what the
// output error asks, measured here on sampled inputs.
TEST(RoundingWeighted, LowerOutputErrorOnInputsWithThoseVariances) {
  constexpr std::int64_t out = 64, in = 512, tokens = 256;
  const auto wt = gaussian(static_cast<std::size_t>(out * in), 3);
  const auto v = channel_weights(in, 9);
  std::mt19937 rng(5);
  std::normal_distribution<double> n01(0.0, 1.0);
  std::vector<double> xin(static_cast<std::size_t>(tokens * in));
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t c = 0; c < in; ++c)
      xin[static_cast<std::size_t>(t * in + c)] = n01(rng) * std::sqrt(static_cast<double>(v[static_cast<std::size_t>(c)]));
  const auto bytes = bf16_bytes(wt);
  const auto ws = bf16_loaded(wt);
  auto output_error = [&](const std::vector<float>& dq) {
    double s = 0;
    for (std::int64_t t = 0; t < tokens; ++t)
      for (std::int64_t r = 0; r < out; ++r) {
        double y = 0;
        for (std::int64_t c = 0; c < in; ++c) {
          const std::size_t i = static_cast<std::size_t>(r * in + c);
          y += (static_cast<double>(ws[i]) - dq[i]) * xin[static_cast<std::size_t>(t * in + c)];
        }
        s += y * y;
      }
    return s;
  };
  for (const Case& k : cases()) {
    if (k.spec.kind == SchemeKind::FP8Block) continue;  // one scale for 32 rows x 32 channels: covered above
    const double mse = output_error(run(with(k.spec, Rounding::Mse), {out, in}, bytes).dq);
    const double weighted = output_error(run(with(k.spec, Rounding::Weighted), {out, in}, bytes, v).dq);
    std::printf("%-16s output error weighted/mse %.3f\n", k.what.c_str(), weighted / mse);
    if (pow2_scaled_fp8(k.spec))
      EXPECT_LE(weighted, mse * (1 + 1e-12)) << k.what;
    else
      EXPECT_LT(weighted, mse) << k.what;
  }
}

TEST(RoundingWeighted, MissingOrBadWeightsAreRefusedNamingTheTensor) {
  const auto bytes = bf16_bytes(gaussian(16 * 64, 1));
  const SchemeSpec s = with({.kind = SchemeKind::NVFP4}, Rounding::Weighted);
  auto refused = [&](std::span<const float> w, const std::string& what) {
    try {
      run(s, {16, 64}, bytes, w);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput) << what;
      EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << e.what();
    }
  };
  refused({}, "no weights");
  const std::vector<float> short_w(63, 1.0f);
  refused(short_w, "63 for 64 inputs");
  std::vector<float> bad(64, 1.0f);
  bad[5] = -1.0f;
  refused(bad, "negative");
  bad[5] = std::nanf("");
  refused(bad, "NaN");
  // The other roundings ignore weights; fp8-tensor (one unsearched scale) needs none.
  const auto w = channel_weights(64, 3);
  for (Rounding r : {Rounding::Nearest, Rounding::Mse})
    EXPECT_EQ(run(with(s, r), {16, 64}, bytes, w).bufs, run(with(s, r), {16, 64}, bytes).bufs) << rounding_name(r);
  const SchemeSpec t = with({.kind = SchemeKind::FP8Tensor}, Rounding::Weighted);
  EXPECT_EQ(run(t, {16, 64}, bytes).bufs, run({.kind = SchemeKind::FP8Tensor}, {16, 64}, bytes).bufs);
}

TEST(RoundingWeighted, ThreeDStackTakesEachExpertsSlice) {
  constexpr std::int64_t experts = 3, out = 16, in = 64;
  const auto x = gaussian(static_cast<std::size_t>(experts * out * in), 21);
  std::vector<float> w;
  for (unsigned e = 0; e < experts; ++e) {
    const auto we = channel_weights(in, 40 + e);
    w.insert(w.end(), we.begin(), we.end());
  }
  const SchemeSpec s = with({.kind = SchemeKind::MXFP4}, Rounding::Weighted);
  const Quantized q3 = run(s, {experts, out, in}, bf16_bytes(x), w);
  for (std::int64_t e = 0; e < experts; ++e) {
    const std::vector<float> xe(x.begin() + e * out * in, x.begin() + (e + 1) * out * in);
    const Quantized q2 = run(s, {out, in}, bf16_bytes(xe),
                             std::span<const float>(w).subspan(static_cast<std::size_t>(e * in), in));
    // codes and scales of expert e are expert e's rows of the stack
    EXPECT_EQ(0, std::memcmp(q2.bufs[0].data(), q3.bufs[0].data() + e * out * in / 2, q2.bufs[0].size())) << e;
    EXPECT_EQ(0, std::memcmp(q2.bufs[1].data(), q3.bufs[1].data() + e * out * in / 32, q2.bufs[1].size())) << e;
  }
  EXPECT_THROW(run(s, {experts, out, in}, bf16_bytes(x), std::span<const float>(w).first(in)), Error);
  // ... and not expert 0's (which would pass above if the offset were lost, were
  // the weights not telling): expert 2 with expert 0's weights gives other bytes.
  const std::vector<float> x2(x.begin() + 2 * out * in, x.end());
  const Quantized q0w = run(s, {out, in}, bf16_bytes(x2), std::span<const float>(w).first(in));
  EXPECT_NE(0, std::memcmp(q0w.bufs[1].data(), q3.bufs[1].data() + 2 * out * in / 32, q0w.bufs[1].size()));
}

TEST(RoundingWeighted, SameBytesForAnyThreadCount) {
  const auto x = gaussian(96 * 512, 11);
  const auto w = channel_weights(512, 12);
  const auto bytes = bf16_bytes(x);
  for (const Case& k : cases()) {
    Quantized one, many;
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 1);
      one = run(with(k.spec, Rounding::Weighted), {96, 512}, bytes, w);
    }
    {
      tbb::global_control c(tbb::global_control::max_allowed_parallelism, 4);
      many = run(with(k.spec, Rounding::Weighted), {96, 512}, bytes, w);
    }
    EXPECT_EQ(one.bufs, many.bufs) << k.what;
  }
}

TEST(RoundingWeighted, MeasureWeightAgreesWithQuantize) {
  const auto x = gaussian(32 * 256, 3);
  const auto w = channel_weights(256, 4);
  const auto bytes = bf16_bytes(x);
  TensorInfo info{"w", DType::BF16, {32, 256}};
  std::vector<SchemeSpec> specs;
  for (const Case& k : cases()) specs.push_back(with(k.spec, Rounding::Weighted));
  std::vector<TensorQuantizeOptions> opts(specs.size());
  for (auto& o : opts) o.channel_weights = w;
  std::vector<ErrorMetrics> measured(specs.size());
  measure_weight(specs, TensorView{&info, bytes}, opts, measured);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    std::vector<std::vector<std::uint8_t>> bufs;
    for (const auto& s : scheme_outputs(specs[i], info.shape)) bufs.emplace_back(dtype_nbytes(s.dtype, shape_numel(s.shape)));
    std::vector<std::span<std::uint8_t>> spans(bufs.begin(), bufs.end());
    ErrorMetrics q;
    quantize_weight(specs[i], TensorView{&info, bytes}, spans, q, opts[i]);
    EXPECT_EQ(measured[i].sum_sq_err, q.sum_sq_err) << specs[i].name();
  }
  // measure_weight refuses a weighted scheme without weights, as quantize_weight does.
  std::vector<TensorQuantizeOptions> none(1);
  std::vector<ErrorMetrics> one(1);
  EXPECT_THROW(measure_weight(std::vector<SchemeSpec>{specs[0]}, TensorView{&info, bytes}, none, one), Error);
}
