#pragma once
// Synthetic checkpoints with a real architecture's tensor names and shapes
// (optionally scaled down), with weights drawn to look like trained ones:
// per-output-channel scale spread, a few outlier input channels, heavy tails.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace selq::pipeline {

struct SynthOptions {
  std::string arch{"llama"};        // a synth_architectures() row's name
  int scale{1};                     // divide hidden/intermediate/rank dims by this
  int layers{-1};                   // -1: the arch's default
  int experts{-1};                  // MoE archs: routed experts per layer (-1: default)
  std::int64_t vocab{-1};           // -1: the arch's default (scaled)
  std::uint64_t seed{1};
  std::uint64_t max_shard_bytes{1ull << 30};
  bool experts_nvfp4{false};        // kimi-k3/deepseek-v3: routed experts pre-quantized NVFP4 (compressed-tensors)
  DType dtype{DType::BF16};        // BF16 or F32 (the same values unrounded: exactness tests)
  // Other files written into the checkpoint with it (name -> content), e.g.
  // the CLI's byte-level tokenizer.json for a model the runtime runs.
  std::map<std::string, std::string> extra_files;
};

struct SynthTensor {
  TensorInfo info;
  float row_scale{0.02f};  // typical magnitude (norm weights are ~1 instead)
  bool is_norm{false};
};

struct SynthModel {
  nlohmann::json config;
  std::vector<SynthTensor> tensors;
};

// One row per architecture `selq synth` writes (pipeline/synth_arch.cpp). A
// new one is its row and its generator.
struct SynthArchitecture {
  const char* name;                              // --arch
  const char* family;                            // the recipe family its names follow (recipe `arch:`)
  SynthModel (*describe)(const SynthOptions&);  // its tensors and config.json
  bool moe;                                  // routed experts (--experts, --experts-nvfp4)
  // Written with the CLI's byte-level tokenizer, so that selq's runtime (eval,
  // calibrate, the runtime tiers) and transformers run it as written.
  bool with_tokenizer;
};
std::span<const SynthArchitecture> synth_architectures();
// The row of `name`; BadInput naming the choices otherwise.
const SynthArchitecture& synth_architecture(const std::string& name);
// "dspark, kimi-k3, ... or llama": the --arch choices, for messages and --help.
std::string synth_architecture_names();

// Tensor list and config.json of an architecture (no data).
SynthModel describe_synth_model(const SynthOptions& options);

// Writes DST (shards, index, config.json, tokenizer stub files). Returns total bytes.
std::uint64_t write_synth_checkpoint(const SynthOptions& options, const std::string& dst);

}  // namespace selq::pipeline
