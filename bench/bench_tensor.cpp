// One 4096x4096 BF16 weight through quantize_weight on all cores, output
// buffers allocated per call: the C++ side of bench/python_overhead.py, which
// times selq.quantize_tensor on the same tensor and scheme.
//   build/<dir>/bench/bench_tensor --benchmark_filter=nvfp4
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/codecs.h"
#include "export/dialect.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"

using namespace selq;

namespace {

constexpr std::int64_t kRows = 4096, kCols = 4096;

const std::vector<std::uint8_t>& weights() {
  static const std::vector<std::uint8_t> data = [] {
    std::mt19937 rng(7);
    std::normal_distribution<float> d(0.0f, 0.02f);
    std::vector<std::uint8_t> b(static_cast<std::size_t>(kRows * kCols * 2));
    for (std::size_t i = 0; i < b.size() / 2; ++i) {
      const std::uint16_t h = f32_to_bf16_ref(d(rng));
      std::memcpy(&b[2 * i], &h, 2);
    }
    return b;
  }();
  return data;
}

// The scheme as the Python API makes it: a recipe's default, adapted to compressed-tensors.
void run(benchmark::State& state, const char* scheme) {
  const auto r = recipe::parse_recipe(std::string("{name: t, default: {scheme: ") + scheme + "}}", "<bench>");
  const auto spec =
      exporter::adapt_scheme_for_dialect(exporter::Dialect::CompressedTensors, *r.default_scheme, DType::BF16);
  TensorInfo info{"tensor", DType::BF16, Shape{kRows, kCols}};
  const TensorView view{&info, weights()};
  for (auto _ : state) {
    std::vector<std::vector<std::uint8_t>> bufs;
    std::vector<std::span<std::uint8_t>> spans;
    for (const auto& s : quant::scheme_outputs(spec, info.shape)) bufs.emplace_back(dtype_nbytes(s.dtype, shape_numel(s.shape)));
    for (auto& b : bufs) spans.emplace_back(b);
    quant::ErrorMetrics m;
    quant::quantize_weight(spec, view, spans, m);
    benchmark::DoNotOptimize(bufs.data());
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(weights().size()));
}

}  // namespace

BENCHMARK_CAPTURE(run, nvfp4, "nvfp4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, mxfp4, "mxfp4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(run, fp8_channel, "fp8-channel")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
