#include "planner/unit_rounding.h"

#include <algorithm>

namespace selq::planner {

RoundingInputs::RoundingInputs(runtime::CausalLM& model, const std::vector<std::int32_t>& tokens,
                               std::int64_t context)
    : model_(model) {
  const auto step = static_cast<std::size_t>(std::max<std::int64_t>(context, 1));
  for (std::size_t b = 0; b < tokens.size(); b += step)
    windows_.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(b),
                          tokens.begin() + static_cast<std::ptrdiff_t>(std::min(tokens.size(), b + step)));
}

void RoundingInputs::moments_hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows) {
  Moments& m = static_cast<RoundingInputs*>(ctx)->moments_[l.module];
  m.sum_sq.resize(static_cast<std::size_t>(l.in), 0.0);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < l.in; ++c) {
      const double v = x[r * l.in + c];
      m.sum_sq[static_cast<std::size_t>(c)] += v * v;
    }
  m.rows += rows;
}

std::vector<float> RoundingInputs::channel_weights(const std::string& module) {
  if (!have_moments_) {
    model_.set_activation_hook(&RoundingInputs::moments_hook, this);
    for (const auto& w : windows_) {
      model_.reset();
      model_.forward(w, false);
    }
    model_.set_activation_hook(nullptr, nullptr);
    model_.reset();
    have_moments_ = true;
  }
  const auto it = moments_.find(module);
  if (it == moments_.end() || it->second.rows == 0) return {};
  std::vector<float> v;
  for (double s : it->second.sum_sq) v.push_back(static_cast<float>(s / static_cast<double>(it->second.rows)));
  return v;
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
    hessians_.emplace(runtime::gather_hessians(model_, layer, model_.layer_linears(layer), states,
                                               model_.hidden_size()));
    hessian_layer_ = layer;
  }
  const std::ptrdiff_t slot = hessians_->find(module);
  if (slot < 0 || hessians_->rows[static_cast<std::size_t>(slot)] == 0) return {};
  return hessians_->h[static_cast<std::size_t>(slot)];
}

}  // namespace selq::planner
