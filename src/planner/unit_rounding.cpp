#include "planner/unit_rounding.h"

#include <algorithm>

#include "runtime/eval/eval.h"

namespace selq::planner {

RoundingInputs::RoundingInputs(runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                               std::int64_t context)
    : model_(model) {
  for (const auto& [b, e] : runtime::windows(static_cast<std::int64_t>(tokens.size()), context).spans)
    windows_.emplace_back(tokens.begin() + b, tokens.begin() + e);
}

void RoundingInputs::moments_hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows) {
  static_cast<RoundingInputs*>(ctx)->moments_[l.module].add(x, rows, l.in);
}

std::vector<float> RoundingInputs::channel_weights(const std::string& module) {
  if (!have_moments_) {
    model_.set_activation_hook(&RoundingInputs::moments_hook, this);
    for (const auto& w : windows_) {
      model_.reset();
      model_.forward(w, false);
      for (auto& [m, s] : moments_) s.close_window(m);  // calibrate's windows: its bits
    }
    model_.set_activation_hook(nullptr, nullptr);
    model_.reset();
    have_moments_ = true;
  }
  const auto it = moments_.find(module);
  return it == moments_.end() ? std::vector<float>{} : it->second.means();
}

void RoundingInputs::advance_to(std::int64_t layer) {
  if (at_layer_ < 0 || at_layer_ > layer) {
    hidden_.clear();
    for (const auto& w : windows_) hidden_.push_back(model_.embed(w));
    at_layer_ = 0;
  }
  for (; at_layer_ < layer; ++at_layer_)
    for (std::size_t s = 0; s < windows_.size(); ++s)
      model_.forward_layer(at_layer_, hidden_[s].data(), static_cast<std::int64_t>(windows_[s].size()));
}

std::span<const double> RoundingInputs::hessian(std::int64_t layer, const std::string& module) {
  if (!hessians_ || hessian_layer_ != layer) {
    advance_to(layer);
    const std::vector<std::span<const float>> states(hidden_.begin(), hidden_.end());
    hessians_.emplace(calibration::gather_hessians(model_, layer, model_.layer_linears(layer), states,
                                               model_.hidden_size()));
    hessian_layer_ = layer;
  }
  const std::ptrdiff_t slot = hessians_->find(module);
  if (slot < 0 || hessians_->rows[static_cast<std::size_t>(slot)] == 0) return {};
  return hessians_->h[static_cast<std::size_t>(slot)];
}

}  // namespace selq::planner
