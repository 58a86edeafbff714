#include "pipeline/rounded_weights.h"

#include "core/error.h"

namespace selq::pipeline {

RoundedWeights::RoundedWeights(const std::map<std::string, std::string>& files, std::string fingerprint,
                               nlohmann::json provenance)
    : fingerprint_(std::move(fingerprint)), provenance_(std::move(provenance)) {
  for (const auto& [tensor, path] : files) {
    auto& f = files_[path];
    if (!f) f = io::SafetensorsFile::open(path);
    by_tensor_[tensor] = f.get();
  }
}

TensorView RoundedWeights::view(const std::string& tensor) const {
  const auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end())
    throw Error(ErrorKind::Internal, "rounding 'gptq': the GPTQ pass left no rounded weights", {"", tensor});
  return it->second->view(tensor);
}

std::span<const float> RoundedWeights::channel_weights(const std::string& tensor) const {
  const auto it = by_tensor_.find(tensor);
  if (it == by_tensor_.end() || !it->second->find(channel_weights_name(tensor))) return {};
  const TensorView v = it->second->view(channel_weights_name(tensor));
  return {reinterpret_cast<const float*>(v.bytes.data()), v.bytes.size() / sizeof(float)};
}

}  // namespace selq::pipeline
