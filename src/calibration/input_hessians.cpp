#include "calibration/input_hessians.h"

#include <tbb/parallel_for.h>

#include <algorithm>

#include "recipe/fused_modules.h"
#include "runtime/model/blas.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text
namespace {

constexpr std::int64_t kHessianPanel = 256;  // columns of H per task: fixed, so sums do not depend on threads

}  // namespace

std::string input_key(const std::string& module) {
  std::string key = recipe::fused_shard_key(module);
  return key.empty() ? module : key;
}

InputHessians::InputHessians(const std::vector<Linear*>& linears) {
  for (Linear* l : linears)
    if (of_input.emplace(input_key(l->module), h.size()).second) {
      slot[l] = h.size();
      h.emplace_back(static_cast<std::size_t>(l->in * l->in), 0.0);
      rows.push_back(0);
    }
}

std::ptrdiff_t InputHessians::find(const std::string& module) const {
  const auto it = of_input.find(input_key(module));
  return it == of_input.end() ? -1 : static_cast<std::ptrdiff_t>(it->second);
}

void InputHessians::hook(void* ctx, const Linear& l, const float* x, std::int64_t rows) {
  auto& self = *static_cast<InputHessians*>(ctx);
  if (const auto it = self.slot.find(&l); it != self.slot.end()) self.add(it->second, x, rows, l.in);
}

void InputHessians::add(std::size_t s, const float* x, std::int64_t rows, std::int64_t n) {
  if (rows == 0) return;
  std::vector<double>& h = this->h[s];
  this->rows[s] += rows;
  panel.resize(static_cast<std::size_t>(n * n));
  float* p = panel.data();
  const std::int64_t panels = (n + kHessianPanel - 1) / kHessianPanel;
  tbb::parallel_for(std::int64_t{0}, panels, [&](std::int64_t k) {
    const std::int64_t j0 = k * kHessianPanel, w = std::min(kHessianPanel, n - j0);
    blas::sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(w),
                static_cast<int>(rows), 1.0f, x, static_cast<int>(n), x + j0, static_cast<int>(n), 0.0f, p + j0,
                static_cast<int>(n));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = j0; j < j0 + w; ++j) h[static_cast<std::size_t>(i * n + j)] += p[i * n + j];
  });
}

InputHessians gather_hessians(CausalLM& model, std::int64_t layer, const std::vector<Linear*>& linears,
                              const std::vector<std::span<const float>>& hidden, std::int64_t hidden_size) {
  InputHessians hs(linears);
  model.set_activation_hook(&InputHessians::hook, &hs);
  std::vector<float> x;
  for (const auto& h : hidden) {
    x.assign(h.begin(), h.end());
    model.forward_layer(layer, x.data(), static_cast<std::int64_t>(h.size()) / hidden_size);
  }
  model.set_activation_hook(nullptr, nullptr);
  return hs;
}

}  // namespace selq::calibration
