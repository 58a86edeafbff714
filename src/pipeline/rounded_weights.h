#pragma once
// GPTQ's rounded weights for a plan's tensors that round `gptq`: F32, or BF16
// where every value is one (MXFP4's), named as the source tensor, in safetensors files that calibration/gptq_pass.h writes
// (this module cannot run the model). The writer stores each tensor from
// them with the scales the GPTQ pass's search chooses for the original
// (quant::store_gptq_weights, with channel_weights()).
#include <map>
#include <span>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace selq::pipeline {

class RoundedWeights {
 public:
  // `files`: source tensor name -> the file holding its rounded weights.
  // `fingerprint`: what they depend on (calibration tokens, schemes, the
  // algorithm's settings), part of the run's fingerprint.
  // `provenance`: the calibration text and settings, for the manifest.
  RoundedWeights(const std::map<std::string, std::string>& files, std::string fingerprint, nlohmann::json provenance);

  // The rounded weights of `tensor` (F32 or BF16, the source's shape); Internal error
  // naming the tensor when the pass made none.
  TensorView view(const std::string& tensor) const;
  // The channel weights GPTQ's scale search used for `tensor` (its Hessian's
  // diagonal; quant::gptq_scale_outputs), empty when it used `mse`.
  std::span<const float> channel_weights(const std::string& tensor) const;
  static std::string channel_weights_name(const std::string& tensor) { return tensor + ".gptq_channel_weights"; }
  const std::string& fingerprint() const { return fingerprint_; }
  const nlohmann::json& provenance() const { return provenance_; }

 private:
  std::map<std::string, const io::SafetensorsFile*> by_tensor_;
  std::map<std::string, std::unique_ptr<io::SafetensorsFile>> files_;  // by path
  std::string fingerprint_;
  nlohmann::json provenance_;
};

}  // namespace selq::pipeline
