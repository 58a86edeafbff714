#pragma once
// Synthetic checkpoints with a real architecture's tensor names and shapes
// (optionally scaled down), with weights drawn to look like trained ones:
// per-output-channel scale spread, a few outlier input channels, heavy tails.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace selq::pipeline {

struct SynthOptions {
  std::string arch{"llama"};        // dspark | kimi-k3 | kimi-k2 | deepseek-v3 | llama
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

// Tensor list and config.json of an architecture (no data).
SynthModel describe_synth_model(const SynthOptions& options);

// Writes DST (shards, index, config.json, tokenizer stub files). Returns total bytes.
std::uint64_t write_synth_checkpoint(const SynthOptions& options, const std::string& dst);

}  // namespace selq::pipeline
