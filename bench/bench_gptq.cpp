// One routed expert's GPTQ solve at DeepSeek-V3's size (issue 49: the solves are
// most of a real MoE layer's time): the inverse of a 7168-input Hessian
// (calibration/gptq.h gptq_inverse) and the column-by-column rounding of one
// 2048 x 7168 MXFP4 weight on it (gptq_round). A layer's gate and up share one
// inverse, so an expert costs one inverse and two roundings, plus its down_proj
// (2048 inputs). Run: build/release/bench/bench_gptq --benchmark_min_time=1x
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "calibration/gptq.h"
#include "quant/scheme.h"

namespace {

using selq::DType;
using selq::TensorInfo;
using selq::TensorView;

// An SPD Hessian with heavy-tailed channel scales and a few shared directions:
// H = diag(d) + B Bᵀ (B: in x 32), the shape of a calibrated one without its cost.
std::vector<double> hessian(std::int64_t in, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n01;
  std::student_t_distribution<double> heavy(3.0);
  const std::int64_t k = 32;
  std::vector<double> b(static_cast<std::size_t>(in * k));
  for (auto& x : b) x = n01(rng);
  std::vector<double> h(static_cast<std::size_t>(in * in));
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t j = 0; j < in; ++j) {
      double s = 0;
      for (std::int64_t f = 0; f < k; ++f) s += b[static_cast<std::size_t>(i * k + f)] * b[static_cast<std::size_t>(j * k + f)];
      h[static_cast<std::size_t>(i * in + j)] = s;
    }
  for (std::int64_t i = 0; i < in; ++i) {
    const double t = heavy(rng);
    h[static_cast<std::size_t>(i * in + i)] += 1.0 + t * t;
  }
  return h;
}

struct Weight {
  TensorInfo info;
  std::vector<float> w;
  TensorView view() const { return {&info, {reinterpret_cast<const std::uint8_t*>(w.data()), w.size() * 4}}; }
};

Weight weight(std::int64_t out, std::int64_t in) {
  std::mt19937 rng(7);
  std::student_t_distribution<float> heavy(4.0f);
  Weight x{TensorInfo{"model.layers.3.mlp.experts.0.gate_proj.weight", DType::F32, {out, in}},
           std::vector<float>(static_cast<std::size_t>(out * in))};
  for (auto& v : x.w) v = 0.02f * heavy(rng);
  return x;
}

selq::quant::SchemeSpec mxfp4_gptq() {
  selq::quant::SchemeSpec s;
  s.kind = selq::quant::SchemeKind::MXFP4;
  s.rounding.value = selq::quant::Rounding::Gptq;
  return s;
}

void BM_GptqInverse(benchmark::State& state) {
  const std::int64_t in = state.range(0);
  const auto h = hessian(in, 1);
  for (auto _ : state) benchmark::DoNotOptimize(selq::calibration::gptq_inverse(h, in, 0.01, "h").u.data());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(in) * in * in / 3.0, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GptqInverse)->Arg(2048)->Arg(7168)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_GptqRound(benchmark::State& state) {
  const std::int64_t out = state.range(0), in = state.range(1);
  const auto h = hessian(in, 2);
  const auto inv = selq::calibration::gptq_inverse(h, in, 0.01, "h");
  const Weight w = weight(out, in);
  const auto spec = mxfp4_gptq();
  selq::calibration::GptqOptions o;
  for (auto _ : state) benchmark::DoNotOptimize(selq::calibration::gptq_round(spec, w.view(), h, o, &inv).weight.data());
  // The lazy block updates: out x in² / 2 multiply-adds.
  state.counters["GFLOP/s"] = benchmark::Counter(double(out) * in * in, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_GptqRound)->Args({2048, 7168})->Args({7168, 2048})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
