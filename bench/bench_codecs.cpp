// Bulk codec throughput against memcpy of the same number of input bytes, in
// the same run. Throughput is reported as input bytes per second, so the ratio
// to BM_memcpy at the same size is the figure of merit (docs/BENCHMARKS.md).
//
//   bench_codecs --benchmark_min_time=0.5
//
// Sizes are input bytes: 256 KiB (cache resident) and 64 MiB (DRAM).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/codecs.h"
#include "core/codecs_simd.h"

namespace {

constexpr std::int64_t kSmall = 256 << 10;
constexpr std::int64_t kLarge = 64 << 20;

// Weight-like data: Gaussian, a few outliers.
const std::vector<float>& F32Pool(std::size_t n) {
  static std::vector<float> pool;
  if (pool.size() < n) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    pool.resize(n);
    for (std::size_t i = 0; i < n; ++i) pool[i] = (i % 997 == 0) ? nd(rng) * 50 : nd(rng);
  }
  return pool;
}

const std::vector<std::uint16_t>& Bf16Pool(std::size_t n) {
  static std::vector<std::uint16_t> pool;
  if (pool.size() < n) {
    const auto& f = F32Pool(n);
    pool.resize(n);
    selq::f32_to_bf16_bulk(f.data(), pool.data(), n);
  }
  return pool;
}

void Finish(benchmark::State& state, std::int64_t in_bytes) {
  state.SetBytesProcessed(state.iterations() * in_bytes);
}

void BM_memcpy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  Finish(state, state.range(0));
}

// Fn(in, out, n) over a BF16 input of range(0) bytes.
template <typename Out, void (*Fn)(const std::uint16_t*, Out*, std::size_t), int kOutPer2 = 2>
void BM_from_bf16(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / 2;
  const auto& in = Bf16Pool(n);
  std::vector<Out> out(n * kOutPer2 / 2 + 1);
  for (auto _ : state) {
    Fn(in.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Finish(state, state.range(0));
}

template <typename Out, void (*Fn)(const float*, Out*, std::size_t), int kOutPer2 = 2>
void BM_from_f32(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / 4;
  const auto& in = F32Pool(n);
  std::vector<Out> out(n * kOutPer2 / 2 + 1);
  for (auto _ : state) {
    Fn(in.data(), out.data(), n);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Finish(state, state.range(0));
}

template <void (*Fn)(const std::uint8_t*, float*, std::size_t), int kElemsPerByte>
void BM_to_f32(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<std::uint8_t> in(bytes);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<std::uint8_t>(i * 131 + 7) & 0xF7;
  std::vector<float> out(bytes * kElemsPerByte);
  for (auto _ : state) {
    Fn(in.data(), out.data(), bytes * kElemsPerByte);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Finish(state, state.range(0));
}

void BM_scale_f32(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / 4;
  const auto& in = F32Pool(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    selq::scale_f32_bulk(in.data(), out.data(), n, 0.37f);
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  Finish(state, state.range(0));
}

void BM_amax_f32(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / 4;
  const auto& in = F32Pool(n);
  for (auto _ : state) benchmark::DoNotOptimize(selq::amax_f32(in.data(), n));
  Finish(state, state.range(0));
}

void BM_amax_bf16(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) / 2;
  const auto& in = Bf16Pool(n);
  for (auto _ : state) benchmark::DoNotOptimize(selq::amax_bf16(in.data(), n));
  Finish(state, state.range(0));
}

// The scalar oracle, for scale: how much the SIMD path buys.
void ScalarBf16ToE4m3(const std::uint16_t* in, std::uint8_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = selq::f32_to_e4m3_sat_ref(selq::bf16_to_f32(in[i]));
}

#define SIZES ->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMicrosecond)

BENCHMARK(BM_memcpy) SIZES;
BENCHMARK(BM_from_bf16<std::uint8_t, selq::bf16_to_e4m3_sat_bulk>)->Name("BM_bf16_to_e4m3_sat") SIZES;
BENCHMARK(BM_from_bf16<std::uint8_t, selq::bf16_to_e2m1_packed_bulk, 1>)->Name("BM_bf16_to_e2m1_packed") SIZES;
BENCHMARK(BM_from_bf16<float, selq::bf16_to_f32_bulk>)->Name("BM_bf16_to_f32") SIZES;
BENCHMARK(BM_from_f32<std::uint16_t, selq::f32_to_bf16_bulk>)->Name("BM_f32_to_bf16") SIZES;
BENCHMARK(BM_from_f32<std::uint8_t, selq::f32_to_e4m3_sat_bulk>)->Name("BM_f32_to_e4m3_sat") SIZES;
BENCHMARK(BM_from_f32<std::uint8_t, selq::f32_to_e2m1_bulk>)->Name("BM_f32_to_e2m1") SIZES;
BENCHMARK(BM_from_f32<std::uint8_t, selq::f32_to_e2m1_packed_bulk, 1>)->Name("BM_f32_to_e2m1_packed") SIZES;
BENCHMARK(BM_to_f32<selq::e4m3_to_f32_bulk, 1>)->Name("BM_e4m3_to_f32") SIZES;
BENCHMARK(BM_to_f32<selq::e2m1_packed_to_f32_bulk, 2>)->Name("BM_e2m1_packed_to_f32") SIZES;
BENCHMARK(BM_scale_f32) SIZES;
BENCHMARK(BM_amax_f32) SIZES;
BENCHMARK(BM_amax_bf16) SIZES;
BENCHMARK(BM_from_bf16<std::uint8_t, ScalarBf16ToE4m3>)->Name("BM_bf16_to_e4m3_scalar_ref") SIZES;

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("simd_target", selq::codecs_simd_target());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
