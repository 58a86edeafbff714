// Engine-resolution self-check (check_config_resolution) at Kimi-K3 scale:
// 61 layers (layer 0 dense, 60 MoE) x 384 routed experts x 3 projections
// plus MLA attention, shared experts, routers, vision tower and lm_head,
// about 70k linear modules. Every dialect writer runs this check before it
// writes a config, and `selq verify` runs it on every checkpoint, so it has
// to stay linear in the module count. The configs come from the real
// writers (detail::*_build, which skip the check itself).
//
//   bench_resolve --benchmark_filter=Check   # per dialect, 10k/35k/70k modules
#include <benchmark/benchmark.h>

#include <map>
#include <string>
#include <vector>

#include "export/dialect.h"
#include "export/dialect_internal.h"
#include "export/engine_resolve.h"

namespace {

using namespace selq::exporter;
using selq::quant::ActMode;
using selq::quant::SchemeKind;
using selq::quant::SchemeSpec;

SchemeSpec make(SchemeKind k, ActMode a) {
  SchemeSpec s;
  s.kind = k;
  s.act = a;
  return s;
}

struct Schemes {
  SchemeSpec attn, experts, experts_alt;
};

Schemes schemes_for(Dialect d) {
  if (d == Dialect::ModelOpt)
    return {make(SchemeKind::FP8Tensor, ActMode::FP8StaticTensor), make(SchemeKind::NVFP4, ActMode::NVFP4),
            make(SchemeKind::FP8Tensor, ActMode::FP8StaticTensor)};
  return {make(SchemeKind::FP8Channel, ActMode::FP8PerToken), make(SchemeKind::MXFP4, ActMode::MXFP4Dynamic),
          make(SchemeKind::FP8Channel, ActMode::FP8PerToken)};
}

// Kimi-K3 names (src/pipeline/synth_arch.cpp). Every 10th MoE layer keeps its
// routed experts in float (tens of thousands of exact names in Quark's
// `exclude`, one regex each in CT's `ignore`), every 7th uses the alternative
// scheme, so configs carry several groups / layer_quant_config keys.
ConfigInput kimi_k3(Dialect d, int layers, int experts = 384) {
  const Schemes s = schemes_for(d);
  std::vector<ModuleDecision> ms;
  for (const char* v : {"vision_tower.blocks.0.attn.qkv", "vision_tower.blocks.0.attn.proj",
                        "vision_tower.blocks.0.mlp.fc1", "vision_tower.blocks.0.mlp.fc2",
                        "mm_projector.linear_1", "mm_projector.linear_2"})
    ms.push_back({v, std::nullopt});
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                          "self_attn.kv_b_proj", "self_attn.o_proj"})
      ms.push_back({p + m, s.attn});
    ms.push_back({p + "self_attn.attn_res_proj", std::nullopt});
    if (l == 0) {
      for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) ms.push_back({p + m, s.attn});
      continue;
    }
    ms.push_back({p + "mlp.gate", std::nullopt});
    std::optional<SchemeSpec> ex = l % 10 == 0 ? std::nullopt : std::optional(l % 7 == 0 ? s.experts_alt : s.experts);
    for (int e = 0; e < experts; ++e)
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        ms.push_back({p + "mlp.experts." + std::to_string(e) + "." + m, ex});
    for (const char* m : {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"})
      ms.push_back({p + m, s.attn});
  }
  ms.push_back({"lm_head", std::nullopt});
  return {ms, nullptr};
}

// The dialect's writer alone, without build_quantization_config's self-check.
nlohmann::json write_config(Dialect d, const ConfigInput& in) {
  return detail::dialect_ops(d).build(in).quantization_config;
}

// Layers for ~10k, ~35k and ~70k modules (1,162 modules per MoE layer).
int layers_for(int64_t approx_modules) { return static_cast<int>(approx_modules / 1162) + 1; }

void BM_Check(benchmark::State& state, Dialect d) {
  ConfigInput in = kimi_k3(d, layers_for(state.range(0)));
  nlohmann::json qc = write_config(d, in);
  std::size_t problems = 0;
  for (auto _ : state) {
    auto p = check_config_resolution(d, in, qc);
    problems = p.size();
    benchmark::DoNotOptimize(p);
  }
  if (problems != 0) state.SkipWithError("the writer's config does not resolve as decided");
  state.counters["modules"] = static_cast<double>(in.linear_modules.size());
  state.counters["config_bytes"] = static_cast<double>(qc.dump().size());
}

void BM_Build(benchmark::State& state, Dialect d) {
  ConfigInput in = kimi_k3(d, layers_for(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(build_quantization_config(d, in));
  state.counters["modules"] = static_cast<double>(in.linear_modules.size());
}

#define SELQ_RESOLVE_BENCH(fn, name, dialect)                                                   \
  BENCHMARK_CAPTURE(fn, name, dialect)->Arg(10000)->Arg(35000)->Arg(70000)->Unit(benchmark::kMillisecond) \
      ->Iterations(1)

SELQ_RESOLVE_BENCH(BM_Check, ct, Dialect::CompressedTensors);
SELQ_RESOLVE_BENCH(BM_Check, quark, Dialect::Quark);
SELQ_RESOLVE_BENCH(BM_Check, modelopt, Dialect::ModelOpt);
SELQ_RESOLVE_BENCH(BM_Build, ct, Dialect::CompressedTensors);
SELQ_RESOLVE_BENCH(BM_Build, quark, Dialect::Quark);
SELQ_RESOLVE_BENCH(BM_Build, modelopt, Dialect::ModelOpt);

}  // namespace

BENCHMARK_MAIN();
