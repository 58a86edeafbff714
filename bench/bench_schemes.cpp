// Weight-quantization throughput on one core: elements/s and BF16 input
// bytes/s per scheme, next to a memcpy of the same bytes in the same run.
// run_scheme_2t/* repeat three schemes with two TBB threads (real time);
// run_scheme_f32/* take the same values as F32 input (ggml's row quantizers
// read F32; see bench/ggml_side_by_side.sh).
//   build/<dir>/bench/bench_schemes --benchmark_min_time=0.5
//   SELQ_HWY_TARGET=AVX2 build/<dir>/bench/bench_schemes ...   # one SIMD target (Highway's name)
#include <benchmark/benchmark.h>
#include <hwy/targets.h>
#include <tbb/global_control.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/codecs.h"
#include "quant/scheme.h"

using namespace selq;
using namespace selq::quant;

namespace {

constexpr std::int64_t kOut = 1024, kIn = 8192;

// SELQ_HWY_TARGET: the kernels' dispatch limited to that target, if this CPU has it.
[[maybe_unused]] const bool kTargetChosen = [] {
  const char* want = std::getenv("SELQ_HWY_TARGET");
  if (!want) return false;
  for (std::int64_t t : hwy::SupportedAndGeneratedTargets())
    if (std::string(hwy::TargetName(t)) == want) {
      hwy::SetSupportedTargetsForTest(t);
      return true;
    }
  std::fprintf(stderr, "SELQ_HWY_TARGET=%s: not a target this CPU runs\n", want);
  std::exit(2);
}();

const std::vector<std::uint8_t>& bf16_weights() {
  static const std::vector<std::uint8_t> data = [] {
    std::mt19937 rng(42);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(kOut * kIn * 2));
    for (std::size_t i = 0; i < b.size() / 2; ++i) {
      const std::uint16_t h = f32_to_bf16_ref(d(rng));
      std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }();
  return data;
}

// The BF16 weights widened to F32 (exactly the same values).
const std::vector<std::uint8_t>& f32_weights() {
  static const std::vector<std::uint8_t> data = [] {
    const auto& h = bf16_weights();
    std::vector<std::uint8_t> b(h.size() * 2);
    for (std::size_t i = 0; i < h.size() / 2; ++i) {
      std::uint16_t v;
      std::memcpy(&v, &h[2 * i], 2);
      const float f = bf16_to_f32(v);
      std::memcpy(&b[4 * i], &f, 4);
    }
    return b;
  }();
  return data;
}

void run_scheme_on(benchmark::State& state, SchemeSpec spec, int threads, DType input = DType::BF16) {
  tbb::global_control cores(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(threads));
  const auto& data = input == DType::F32 ? f32_weights() : bf16_weights();
  TensorInfo info{"bench.weight", input, Shape{kOut, kIn}};
  std::vector<std::vector<std::uint8_t>> bufs;
  for (const auto& s : scheme_outputs(spec, info.shape))
    bufs.emplace_back(dtype_nbytes(s.dtype, shape_numel(s.shape)));
  std::vector<std::span<std::uint8_t>> spans(bufs.begin(), bufs.end());
  ErrorMetrics m;
  for (auto _ : state) {
    quantize_weight(spec, TensorView{&info, data}, spans, m);
    benchmark::DoNotOptimize(bufs[0].data());
  }
  state.SetItemsProcessed(state.iterations() * kOut * kIn);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(data.size()));
  state.counters["rel_err"] = m.rel_frobenius();
}

void run_scheme(benchmark::State& state, SchemeSpec spec) { run_scheme_on(state, spec, 1); }
// Two TBB threads inside one quantize_weight call (wall time: CPU time would
// add both threads up).
void run_scheme_2t(benchmark::State& state, SchemeSpec spec) { run_scheme_on(state, spec, 2); }
void run_scheme_f32(benchmark::State& state, SchemeSpec spec) {
  run_scheme_on(state, spec, 1, DType::F32);
}

void BM_memcpy_same_bytes(benchmark::State& state) {
  const auto& data = bf16_weights();
  std::vector<std::uint8_t> dst(data.size());
  for (auto _ : state) {
    std::memcpy(dst.data(), data.data(), data.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * kOut * kIn);
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(data.size()));
}

SchemeSpec spec_of(SchemeKind k, Rounding r = Rounding::Nearest) {
  SchemeSpec s;
  s.kind = k;
  s.rounding.value = r;
  if (k == SchemeKind::IntGroup) {
    s.bits = 4;
    s.group_size = 128;
    s.int_pack_int32 = true;
    s.scale_dtype = DType::BF16;
  }
  if (k == SchemeKind::FP8Channel) s.scale_dtype = DType::BF16;
  return s;
}

}  // namespace

BENCHMARK(BM_memcpy_same_bytes)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, mxfp4, spec_of(SchemeKind::MXFP4))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, fp8_channel_bf16scale, spec_of(SchemeKind::FP8Channel))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, nvfp4, spec_of(SchemeKind::NVFP4))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, fp8_block128, spec_of(SchemeKind::FP8Block))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, int4_g128_packed, spec_of(SchemeKind::IntGroup))->Unit(benchmark::kMillisecond);
// Rounding mse's scale search (quant/rounding_mse.h) beside the same
// schemes' nearest rows above.
BENCHMARK_CAPTURE(run_scheme, mxfp4_mse, spec_of(SchemeKind::MXFP4, Rounding::Mse))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, nvfp4_mse, spec_of(SchemeKind::NVFP4, Rounding::Mse))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme, int4_g128_packed_mse, spec_of(SchemeKind::IntGroup, Rounding::Mse))
    ->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(run_scheme_f32, mxfp4, spec_of(SchemeKind::MXFP4))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme_f32, fp8_channel_bf16scale, spec_of(SchemeKind::FP8Channel))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme_f32, nvfp4, spec_of(SchemeKind::NVFP4))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(run_scheme_f32, int4_g128_packed, spec_of(SchemeKind::IntGroup))->Unit(benchmark::kMillisecond);

BENCHMARK_CAPTURE(run_scheme_2t, mxfp4, spec_of(SchemeKind::MXFP4))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_scheme_2t, fp8_channel_bf16scale, spec_of(SchemeKind::FP8Channel))->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run_scheme_2t, nvfp4, spec_of(SchemeKind::NVFP4))->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
