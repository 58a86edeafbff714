// fp8-channel-e8m0 (FP8 E4M3 weights, one E8M0 power-of-two scale per output
// channel) against a scalar implementation written here from the format
// definitions alone (OCP MX spec §5.4.1/§6.3 and docs/FORMAT_RULES.md §2 for the scale
// rules, E4M3FN by enumerating its 127 finite magnitudes): no selq codec is
// used to compute the expected bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>

#include "core/error.h"
#include "export/dialect.h"
#include "quant/scheme.h"
#include "quant/scheme_traits.h"
#include "recipe/recipe.h"

using namespace selq;
using namespace selq::quant;

namespace {

// ---- the independent definition ----

// E4M3FN magnitude of code c (0..0x7E): bias 7, subnormals below exponent field 1.
double e4m3_magnitude(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

// Nearest E4M3 code to q, ties to the even code, magnitudes past 448 saturate.
std::uint8_t e4m3_code(double q) {
  const std::uint8_t sign = std::signbit(q) ? 0x80 : 0x00;
  const double a = std::fabs(q);
  int best = 0;
  for (int c = 1; c <= 0x7E; ++c) {
    const double d = std::fabs(e4m3_magnitude(c) - a), db = std::fabs(e4m3_magnitude(best) - a);
    if (d < db || (d == db && (c & 1) == 0)) best = c;
  }
  return static_cast<std::uint8_t>(sign | best);
}

// Unbiased shared exponent for a row of amax `amax` (E4M3: emax 8, 3 mantissa bits, max 448).
int shared_exponent(double amax, ScaleRule rule) {
  if (amax == 0) return -127;
  int k = 0;
  const double m = std::frexp(amax, &k);  // amax = m 2^k, m in [0.5, 1)
  int e = 0;
  switch (rule) {
    case ScaleRule::Floor: e = (k - 1) - 8; break;
    case ScaleRule::Ceil: e = (m == 0.5 ? k - 1 : k) - 8; break;
    case ScaleRule::Even: {
      // Significand rounded to E4M3's 4 significant bits, halves up, then floor.
      const double r = std::floor(m * 16 + 0.5);
      e = (r == 16 ? k : k - 1) - 8;
      break;
    }
    case ScaleRule::RCeil:  // the smallest power of two X with amax / X <= 448
      e = (k - 1) - 9;
      while (std::ldexp(448.0, e) < amax) ++e;
      break;
  }
  return std::max(-127, std::min(127, e));
}

struct Expected {
  std::vector<std::uint8_t> weight, scale;
};

Expected reference(const std::vector<float>& x, std::int64_t rows, std::int64_t in, ScaleRule rule) {
  Expected e;
  for (std::int64_t r = 0; r < rows; ++r) {
    double amax = 0;
    for (std::int64_t c = 0; c < in; ++c) amax = std::max(amax, std::fabs(double(x[r * in + c])));
    const int se = shared_exponent(amax, rule);
    e.scale.push_back(static_cast<std::uint8_t>(se + 127));
    for (std::int64_t c = 0; c < in; ++c) e.weight.push_back(e4m3_code(std::ldexp(double(x[r * in + c]), -se)));
  }
  return e;
}

// ---- running selq ----

std::vector<std::uint8_t> bytes_of(const std::vector<float>& v, DType dt) {
  std::vector<std::uint8_t> b(v.size() * (dt == DType::F32 ? 4 : 2));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (dt == DType::F32) {
      std::memcpy(&b[4 * i], &v[i], 4);
    } else {
      std::uint32_t u = 0;
      std::memcpy(&u, &v[i], 4);
      const auto h = static_cast<std::uint16_t>(u >> 16);  // values below are exact in BF16
      std::memcpy(&b[2 * i], &h, 2);
    }
  }
  return b;
}

struct Quantized {
  std::vector<std::vector<std::uint8_t>> outs;
  ErrorMetrics metrics;
  std::vector<float> dq;
};

Quantized run(const SchemeSpec& spec, const Shape& shape, const std::vector<float>& x, DType dt) {
  const auto data = bytes_of(x, dt);
  TensorInfo info{"model.layers.0.mlp.down_proj.weight", dt, shape};
  Quantized r;
  for (const auto& o : scheme_outputs(spec, shape)) r.outs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  std::vector<std::span<std::uint8_t>> spans(r.outs.begin(), r.outs.end());
  quantize_weight(spec, TensorView{&info, data}, spans, r.metrics);
  std::vector<std::span<const std::uint8_t>> cs(spans.begin(), spans.end());
  r.dq = dequantize_weight(spec, shape, cs);
  return r;
}

// Rows spanning 2^-40 .. 2^40 in magnitude, BF16-exact values, one all-zero row.
std::vector<float> rows_of_many_magnitudes(std::int64_t rows, std::int64_t in, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(rows * in));
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < in; ++c) {
      float v = r == 3 ? 0.0f : std::ldexp(d(rng), static_cast<int>(r % 81) - 40);
      std::uint32_t u = 0;
      std::memcpy(&u, &v, 4);
      u &= 0xFFFF0000u;  // BF16-exact
      std::memcpy(&v, &u, 4);
      x[static_cast<std::size_t>(r * in + c)] = v == 0.0f ? 0.0f : v;  // no -0
    }
  return x;
}

SchemeSpec e8m0(ScaleRule rule, bool keepdim = true) {
  SchemeSpec s;
  s.kind = SchemeKind::FP8ChannelE8M0;
  s.scale_rule = rule;
  s.scale_keepdim = keepdim;
  return s;
}

}  // namespace

TEST(Fp8ChannelE8M0, BitExactAgainstTheDefinitionForEveryRuleAndSourceDtype) {
  const std::int64_t rows = 96, in = 80;
  const auto x = rows_of_many_magnitudes(rows, in, 7);
  for (ScaleRule rule : {ScaleRule::Even, ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil})
    for (DType dt : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(e8m0(rule).name() + " " + std::string(dtype_name(dt)));
      const Expected want = reference(x, rows, in, rule);
      const Quantized got = run(e8m0(rule), Shape{rows, in}, x, dt);
      ASSERT_EQ(got.outs.size(), 2u);
      EXPECT_EQ(got.outs[0], want.weight);
      EXPECT_EQ(got.outs[1], want.scale);
      // Dequantized: code value times the power of two, exactly.
      for (std::int64_t i = 0; i < rows * in; ++i) {
        const std::uint8_t c = want.weight[static_cast<std::size_t>(i)];
        const double v = (c & 0x80 ? -1 : 1) * e4m3_magnitude(c & 0x7F);
        ASSERT_EQ(got.dq[static_cast<std::size_t>(i)], float(std::ldexp(v, want.scale[static_cast<std::size_t>(i / in)] - 127)));
      }
      EXPECT_EQ(got.metrics.elements, static_cast<std::uint64_t>(rows * in));
      EXPECT_EQ(got.metrics.blocks, static_cast<std::uint64_t>(rows));
    }
}

TEST(Fp8ChannelE8M0, FloorClipsWhatRCeilKeeps) {
  // Every row's amax is 1.875 * 2^k: FLOOR puts it at 480 > 448 (saturated),
  // RCEIL at 240 (never clipped).
  const std::int64_t rows = 16, in = 32;
  std::vector<float> x(rows * in);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < in; ++c)
      x[static_cast<std::size_t>(r * in + c)] = std::ldexp(c == 0 ? 1.875f : 0.125f, static_cast<int>(r) - 8);
  const Quantized floor = run(e8m0(ScaleRule::Floor), Shape{rows, in}, x, DType::F32);
  const Quantized rceil = run(e8m0(ScaleRule::RCeil), Shape{rows, in}, x, DType::F32);
  EXPECT_EQ(floor.metrics.clipped_blocks, static_cast<std::uint64_t>(rows));
  EXPECT_EQ(floor.outs[0][0], 0x7E);  // ±448, the largest finite E4M3
  EXPECT_EQ(rceil.metrics.clipped_elements, 0u);
  EXPECT_EQ(reference(x, rows, in, ScaleRule::Floor).weight, floor.outs[0]);
  EXPECT_EQ(reference(x, rows, in, ScaleRule::RCeil).weight, rceil.outs[0]);
}

TEST(Fp8ChannelE8M0, ShapesExpertsAndBudget) {
  const auto o = scheme_outputs(e8m0(ScaleRule::Even), Shape{4, 24, 40});
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[0].dtype, DType::F8_E4M3);
  EXPECT_EQ(o[0].shape, (Shape{4, 24, 40}));
  EXPECT_EQ(o[1].dtype, DType::U8);
  EXPECT_EQ(o[1].shape, (Shape{4, 24, 1}));
  EXPECT_EQ(scheme_outputs(e8m0(ScaleRule::Even, false), Shape{24, 40})[1].shape, (Shape{24}));
  // A 3-D stack is its experts one after the other.
  const auto x = rows_of_many_magnitudes(4 * 24, 40, 11);
  const Quantized stack = run(e8m0(ScaleRule::Even), Shape{4, 24, 40}, x, DType::BF16);
  const Expected want = reference(x, 4 * 24, 40, ScaleRule::Even);
  EXPECT_EQ(stack.outs[0], want.weight);
  EXPECT_EQ(stack.outs[1], want.scale);
  // Gaussian weights stay well within the FP8 budget.
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> g(64 * 256);
  for (auto& v : g) v = d(rng);
  const Quantized gr = run(e8m0(ScaleRule::Even), Shape{64, 256}, g, DType::F32);
  EXPECT_LT(gr.metrics.rel_frobenius(), error_budget(e8m0(ScaleRule::Even)));
  EXPECT_LT(gr.metrics.rel_frobenius(), 0.05);
}

TEST(Fp8ChannelE8M0, NonFiniteWeightIsAnErrorNamingTheTensor) {
  std::vector<float> x(8 * 32, 0.5f);
  x[2 * 32 + 5] = std::numeric_limits<float>::quiet_NaN();
  try {
    run(e8m0(ScaleRule::Even), Shape{8, 32}, x, DType::F32);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.where().tensor, "model.layers.0.mlp.down_proj.weight");
    EXPECT_NE(e.message().find("69"), std::string::npos) << e.message();  // flat index 2 * 32 + 5
  }
}

TEST(Fp8ChannelE8M0, FromARecipeWithItsOptionsAndOneLabel) {
  const auto r = recipe::parse_recipe(
      "name: x\nrules:\n  - match: a\n    scheme: fp8-channel-e8m0\n"
      "    options: {scale_rule: rceil, scale_keepdim: false, activations: fp8-per-token}\n",
      "r.yaml");
  const SchemeSpec& s = r.rules.at(0).scheme;
  EXPECT_EQ(s.kind, SchemeKind::FP8ChannelE8M0);
  EXPECT_EQ(s.scale_rule, ScaleRule::RCeil);
  EXPECT_FALSE(s.scale_keepdim);
  EXPECT_EQ(s.name(), "fp8-channel-e8m0-rceil");
  EXPECT_EQ(recipe::describe_scheme(s), "fp8-channel-e8m0-rceil + fp8-per-token activations");
  // Options of other kinds are refused at their key, naming who takes them.
  try {
    recipe::parse_recipe("name: x\nrules:\n  - match: a\n    scheme: fp8-channel-e8m0\n    options: {scale_dtype: bf16}\n",
                         "r.yaml");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("r.yaml:5:15"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("only fp8-tensor, fp8-channel, int4, int8"), std::string::npos) << e.what();
  }
  // No dialect writes it yet: each says why in one line.
  for (auto d : {exporter::Dialect::CompressedTensors, exporter::Dialect::Quark, exporter::Dialect::ModelOpt})
    EXPECT_THROW(exporter::check_dialect_supports(d, s), Error);
}
