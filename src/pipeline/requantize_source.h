#pragma once
// How a pre-quantized module of the source is stored, so that a recipe with
// `requantize: true` can dequantize it and quantize it with another scheme.
// Understood: a config in one of selq's dialects (compressed-tensors, quark,
// modelopt: the scheme each module resolves to, as vLLM resolves it; read
// back by export/dialect_read.h) and block FP8 with `weight_scale_inv`
// (DeepSeek-V3 / HF fine-grained FP8, quant_method "fp8").
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "quant/scheme.h"

namespace selq::pipeline {

struct StoredWeight {
  quant::SchemeSpec scheme;          // how the stored tensors encode the weight
  Shape shape;                       // logical weight shape ([out,in] or [E,out,in])
  std::vector<std::string> tensors;  // the stored tensors, in quant::scheme_outputs order
  std::uint64_t bytes{0};            // their total size
};

class StoredWeightFinder {
 public:
  // `modules`: every linear module of the checkpoint (for engine-style
  // resolution of fused layers and experts).
  StoredWeightFinder(const io::Checkpoint& ckpt, std::vector<std::string> modules, DType model_dtype);
  ~StoredWeightFinder();
  // Throws Unsupported naming the module when its storage is not understood.
  StoredWeight find(const std::string& module);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace selq::pipeline
