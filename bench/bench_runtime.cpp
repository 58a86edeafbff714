// Forward-pass throughput of the reference runtime (LlamaModel) next to the
// FP32 matrix-multiply peak of the same machine, measured in the same run.
//   SELQ_BENCH_MODEL=DIR build/<dir>/bench/bench_runtime --benchmark_min_time=2
// DIR: an imported SmolLM2 (`selq import-gguf`); unset, a random BF16 Llama
// with SmolLM2-135M's shapes (30 layers) is synthesized in a temp dir, so the
// numbers are the same work either way. The quantized model is DIR quantized
// with uniform MXFP4 (weights dequantized at load, activations QDQ'd per token
// in every forward), written to a temp dir.
//
// Counters: tok/s; GFLOP/s of useful model work (2 x linear params x tokens,
// lm_head for the logit rows asked for, causal attention QK^T and PV);
// frac_meas = GFLOP/s / best OpenBLAS sgemm GFLOP/s at the same thread count
// (square N=2048, measured here); frac_theory = GFLOP/s / (threads x GHz x
// FLOP/cycle), GHz from /proc/cpuinfo, FLOP/cycle from the CPU flags
// (AVX-512F: 64, AVX2+FMA: 32 assuming two 256-bit FMA pipes, AVX: 16).
// Decode also reports GB/s (the weights as the runtime holds them plus the KV
// cache read, per token) and frac_bw = GB/s / the best read bandwidth of a
// 1 GiB buffer at the same thread count (BM_stream, measured here, like
// STREAM but reading only, as decode does; the triad is printed beside it).
// The runtime's threads are TBB's (tbb::global_control per benchmark); its
// BLAS calls are one-threaded tasks.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "pipeline/synth.h"
#include "recipe/recipe.h"
#include "runtime/model/llama.h"

using namespace selq;
namespace fs = std::filesystem;

namespace {

struct CpuPeak {
  double ghz{0};
  int flop_per_cycle{0};
  std::string isa;
};

CpuPeak cpu_peak() {
  CpuPeak p;
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags;
  double mhz = 0;
  while (std::getline(f, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    if (mhz == 0 && line.rfind("cpu MHz", 0) == 0) mhz = std::stod(line.substr(colon + 1));
    if (flags.empty() && line.rfind("flags", 0) == 0) {
      std::istringstream words(line.substr(colon + 1));
      for (std::string w; words >> w;) flags.insert(w);
    }
  }
  auto has = [&](const char* name) { return flags.count(name) != 0; };
  p.ghz = mhz / 1000.0;
  if (has("avx512f")) {
    p.flop_per_cycle = 64;
    p.isa = "AVX-512F (2 x 512-bit FMA assumed)";
  } else if (has("avx2") && has("fma")) {
    p.flop_per_cycle = 32;
    p.isa = "AVX2+FMA (2 x 256-bit FMA assumed)";
  } else if (has("avx")) {
    p.flop_per_cycle = 16;
    p.isa = "AVX (1 add + 1 mul 256-bit)";
  } else {
    p.flop_per_cycle = 8;
    p.isa = "SSE";
  }
  return p;
}

double theory_gflops(int threads) {
  static const CpuPeak p = cpu_peak();
  return threads * p.ghz * p.flop_per_cycle;
}

double sgemm_seconds(int n, const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& c) {
  auto t0 = std::chrono::steady_clock::now();
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

constexpr int kPeakN = 2048;

// Best of several N=2048 sgemm calls: the achievable peak the forward is
// compared with (measured once per thread count, before the first forward).
double measured_peak_gflops(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  openblas_set_num_threads(threads);
  const int n = kPeakN;
  std::vector<float> a(static_cast<std::size_t>(n) * n), b(a.size()), c(a.size());
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : a) v = d(rng);
  for (auto& v : b) v = d(rng);
  double best = 1e30;
  for (int i = 0; i < 5; ++i) best = std::min(best, sgemm_seconds(n, a, b, c));
  const double g = 2.0 * n * n * static_cast<double>(n) / best / 1e9;
  cache[threads] = g;
  openblas_set_num_threads(1);  // the runtime's own setting: its BLAS calls run inside TBB tasks
  return g;
}

// ---- memory bandwidth (the decode roofline), STREAM-like
constexpr std::size_t kStreamBytes = std::size_t{1} << 30;  // far beyond any L3

struct StreamBuffers {
  std::vector<std::uint64_t> a, b, c;  // each kStreamBytes / 3 for the triad; `a` alone for reads
  StreamBuffers() : a(kStreamBytes / 3 / 8, 1), b(a.size(), 2), c(a.size(), 3) {}
};
StreamBuffers& stream_buffers() {
  static StreamBuffers s;
  return s;
}

// Seconds to read all three buffers once (integer sum: vectorizes, no FP order issue).
double stream_read_seconds(int threads) {
  auto& s = stream_buffers();
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  auto t0 = std::chrono::steady_clock::now();
  std::uint64_t total = 0;
  for (const auto* v : {&s.a, &s.b, &s.c})
    total += tbb::parallel_reduce(
        tbb::blocked_range<std::size_t>(0, v->size(), 1 << 16), std::uint64_t{0},
        [&](const tbb::blocked_range<std::size_t>& r, std::uint64_t acc) {
          for (std::size_t i = r.begin(); i < r.end(); ++i) acc += (*v)[i];
          return acc;
        },
        std::plus<>());
  benchmark::DoNotOptimize(total);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// a = b + 3 c over the buffers (STREAM's triad; counts 3 x bytes, no write-allocate).
double stream_triad_seconds(int threads) {
  auto& s = stream_buffers();
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  auto t0 = std::chrono::steady_clock::now();
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, s.a.size(), 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i < r.end(); ++i) s.a[i] = s.b[i] + 3 * s.c[i];
  });
  benchmark::DoNotOptimize(s.a.data());
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double stream_bytes() { return 3.0 * static_cast<double>(stream_buffers().a.size()) * 8.0; }

// Best of several full reads, GB/s: decode's achievable bandwidth.
double measured_read_gbs(int threads) {
  static std::map<int, double> cache;
  if (auto it = cache.find(threads); it != cache.end()) return it->second;
  double best = 1e30;
  for (int i = 0; i < 5; ++i) best = std::min(best, stream_read_seconds(threads));
  return cache[threads] = stream_bytes() / best / 1e9;
}

fs::path temp_root() {
  static const fs::path root = [] {
    fs::path p = fs::temp_directory_path() / fmt::format("selq-bench-runtime-{}", ::getpid());
    fs::create_directories(p);
    return p;
  }();
  return root;
}

struct TempCleanup {
  ~TempCleanup() {
    std::error_code ec;
    fs::remove_all(fs::temp_directory_path() / fmt::format("selq-bench-runtime-{}", ::getpid()), ec);
  }
} cleanup;

std::string base_dir() {
  static const std::string dir = [] {
    if (const char* env = std::getenv("SELQ_BENCH_MODEL"); env && *env) return std::string(env);
    pipeline::SynthOptions o;
    o.arch = "llama";
    o.layers = 30;  // SmolLM2-135M; the synth default is 4
    const std::string d = (temp_root() / "synth-llama").string();
    pipeline::write_synth_checkpoint(o, d);
    return d;
  }();
  return dir;
}

std::string quant_dir() {
  static const std::string dir = [] {
    auto src = io::Checkpoint::open(base_dir());
    auto r = recipe::parse_recipe(
        "name: bench-mxfp4\narch: llama\ndialect: quark\n"
        "default:\n  scheme: mxfp4\n  options: {scale_rule: even, activations: mxfp4-dynamic}\n",
        "bench-mxfp4.yaml");
    auto plan = pipeline::make_plan(*src, r);
    const std::string d = (temp_root() / "mxfp4").string();
    pipeline::run_quantize(*src, plan, r, d);
    return d;
  }();
  return dir;
}

runtime::LlamaModel& model(bool quantized) {
  static std::unique_ptr<runtime::LlamaModel> m[2];
  auto& p = m[quantized ? 1 : 0];
  if (!p) p = runtime::LlamaModel::load(quantized ? quant_dir() : base_dir());
  return *p;
}

std::vector<std::int32_t> tokens(std::int64_t n, std::int64_t vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::int32_t> d(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = d(rng);
  return t;
}

// Useful FLOPs of running `T` tokens after `pos0` cached ones, with
// `logit_rows` rows of the head.
double forward_flops(const runtime::LlamaModel& m, std::int64_t pos0, std::int64_t T, std::int64_t logit_rows) {
  const auto& c = m.config();
  double lin = 0;
  for (const auto& L : m.layers())
    for (const auto* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down})
      lin += static_cast<double>(l->out) * static_cast<double>(l->in);
  double visible = 0;  // sum over new tokens of the positions each attends to
  for (std::int64_t t = 0; t < T; ++t) visible += static_cast<double>(pos0 + t + 1);
  const double attn = 4.0 * static_cast<double>(c.layers * c.heads * c.head_dim) * visible;
  const double head = 2.0 * static_cast<double>(c.vocab * c.hidden) * static_cast<double>(logit_rows);
  return 2.0 * lin * static_cast<double>(T) + attn + head;
}

void set_rate_counters(benchmark::State& state, double flops_per_iter, double tokens_per_iter, int threads) {
  const auto iters = static_cast<double>(state.iterations());
  const double gflop = flops_per_iter * iters / 1e9;
  using C = benchmark::Counter;
  state.counters["tok/s"] = C(tokens_per_iter * iters, C::kIsRate);
  state.counters["GFLOP/s"] = C(gflop, C::kIsRate);
  // Rates divided by a peak: the reporter divides by the run's real time.
  state.counters["frac_meas"] = C(gflop / measured_peak_gflops(threads), C::kIsRate);
  state.counters["frac_theory"] = C(gflop / theory_gflops(threads), C::kIsRate);
}

// args: tokens, threads, quantized, all_logits
void BM_prefill(benchmark::State& state) {
  const std::int64_t T = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool quantized = state.range(2) != 0, all_logits = state.range(3) != 0;
  measured_peak_gflops(threads);
  auto& m = model(quantized);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const auto toks = tokens(T, m.config().vocab);
  for (auto _ : state) {
    m.reset();
    auto logits = m.forward(toks, all_logits);
    benchmark::DoNotOptimize(logits.data());
  }
  set_rate_counters(state, forward_flops(m, 0, T, all_logits ? T : 1), static_cast<double>(T), threads);
}

// args: context, threads, quantized. One new token after `context` cached
// ones per iteration (the cache is truncated back each time).
void BM_decode(benchmark::State& state) {
  const std::int64_t ctx = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  const bool quantized = state.range(2) != 0;
  measured_peak_gflops(threads);
  measured_read_gbs(threads);
  auto& m = model(quantized);
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(threads));
  const auto toks = tokens(ctx + 1, m.config().vocab);
  m.reset();
  m.forward(std::span(toks).first(static_cast<std::size_t>(ctx)), false);
  for (auto _ : state) {
    m.truncate(ctx);
    auto logits = m.forward(std::span(toks).subspan(static_cast<std::size_t>(ctx), 1), false);
    benchmark::DoNotOptimize(logits.data());
  }
  set_rate_counters(state, forward_flops(m, ctx, 1, 1), 1.0, threads);
  const auto& c = m.config();
  const double kv_bytes = 2.0 * 4.0 * static_cast<double>(c.layers * c.kv_heads * c.head_dim) * static_cast<double>(ctx + 1);
  const double gb = (static_cast<double>(m.weight_bytes()) + kv_bytes) * static_cast<double>(state.iterations()) / 1e9;
  using C = benchmark::Counter;
  state.counters["GB/s"] = C(gb, C::kIsRate);
  state.counters["frac_bw"] = C(gb / measured_read_gbs(threads), C::kIsRate);
  state.counters["MB/token"] = (static_cast<double>(m.weight_bytes()) + kv_bytes) / 1e6;
}

// args: threads, triad (0: read). GB/s of the 1 GiB buffers.
void BM_stream(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool triad = state.range(1) != 0;
  stream_buffers();  // allocated and first touched outside the timing
  for (auto _ : state) benchmark::DoNotOptimize(triad ? stream_triad_seconds(threads) : stream_read_seconds(threads));
  state.counters["GB/s"] = benchmark::Counter(stream_bytes() * static_cast<double>(state.iterations()) / 1e9,
                                              benchmark::Counter::kIsRate);
}

// args: N, threads
void BM_sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), threads = static_cast<int>(state.range(1));
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<std::size_t>(n) * n, 0.5f), b(a.size(), 0.25f), c(a.size());
  for (auto _ : state) {
    sgemm_seconds(n, a, b, c);
    benchmark::DoNotOptimize(c.data());
  }
  openblas_set_num_threads(1);
  const double flops = 2.0 * n * n * static_cast<double>(n);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
  state.counters["frac_theory"] = benchmark::Counter(flops * static_cast<double>(state.iterations()) / 1e9 /
                                                         theory_gflops(threads),
                                                     benchmark::Counter::kIsRate);
}

// 1 and 2 threads, and every core of a bigger machine.
std::vector<int> thread_counts() {
  std::vector<int> t{1, 2};
  if (const int all = static_cast<int>(std::thread::hardware_concurrency()); all > 2) t.push_back(all);
  return t;
}

void prefill_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"T", "thr", "quant", "all_logits"});
  for (int q : {0, 1})
    for (int thr : thread_counts())
      for (int T : {128, 512}) b->Args({T, thr, q, 0});
  for (int thr : thread_counts()) b->Args({512, thr, 0, 1});  // perplexity-style: every row's logits
}

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ctx", "thr", "quant"});
  for (int q : {0, 1})
    for (int thr : thread_counts())
      for (int ctx : {128, 512}) b->Args({ctx, thr, q});
}

BENCHMARK(BM_sgemm)->ArgNames({"N", "thr"})->Args({kPeakN, 1})->Args({kPeakN, 2})->Args({4096, 2})
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(BM_stream)->ArgNames({"thr", "triad"})->Args({1, 0})->Args({2, 0})->Args({1, 1})->Args({2, 1})
    ->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(BM_prefill)->Apply(prefill_args)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();
BENCHMARK(BM_decode)->Apply(decode_args)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

std::string read_first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const CpuPeak p = cpu_peak();
  benchmark::AddCustomContext("model", std::getenv("SELQ_BENCH_MODEL") ? std::getenv("SELQ_BENCH_MODEL")
                                                                        : "synthetic SmolLM2-135M shapes");
  benchmark::AddCustomContext("openblas", openblas_get_config());
  benchmark::AddCustomContext("peak_assumption",
                              fmt::format("{:.3f} GHz (/proc/cpuinfo) x {} FLOP/cycle/core, {}", p.ghz,
                                          p.flop_per_cycle, p.isa));
  benchmark::AddCustomContext("loadavg_start", read_first_line("/proc/loadavg"));
  benchmark::RunSpecifiedBenchmarks();
  std::fprintf(stderr, "loadavg_end: %s\n", read_first_line("/proc/loadavg").c_str());
  benchmark::Shutdown();
  return 0;
}
