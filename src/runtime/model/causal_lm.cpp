// CausalLM's defaults: what an architecture that runs only whole refuses
// (the rows and load_model: runtime/model/architectures.cpp).
#include "runtime/model/causal_lm.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/model/architectures.h"

namespace selq::runtime {

CausalLM::~CausalLM() = default;

namespace {
[[noreturn]] void no_layer_by_layer(const CausalLM& m) {
  throw_unsupported(fmt::format("{}: the runtime runs model_type '{}' whole, not layer by layer (which rounding "
                                "'gptq' needs; it does so for {})",
                                m.path(), m.model_type(), layer_by_layer_model_types_text()));
}
}  // namespace

std::int64_t CausalLM::layer_count() const { no_layer_by_layer(*this); }
std::int64_t CausalLM::hidden_size() const { no_layer_by_layer(*this); }
std::vector<float> CausalLM::embed(std::span<const std::int32_t>) { no_layer_by_layer(*this); }
void CausalLM::forward_layer(std::int64_t, float*, std::int64_t) { no_layer_by_layer(*this); }
std::vector<Linear*> CausalLM::layer_linears(std::int64_t) { no_layer_by_layer(*this); }

}  // namespace selq::runtime
