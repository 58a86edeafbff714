#pragma once
// The Hessians H = Σ x xᵀ of linears' inputs as a decoder layer runs
// calibration sequences (GPTQ's statistic): one per input, since the members
// of a fused module (q/k/v, gate/up, q_a/kv_a, an expert's w1/w3) read the
// same rows, in double, summed in fixed panels so that the result does not
// depend on the thread count. A routed expert sees only the rows routed to it
// (none: no Hessian, rows 0). Used by quantize's gptq pass and the planner's
// gptq candidates.
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "runtime/model/causal_lm.h"

namespace selq::calibration {

// The key of the input a linear reads: the fused module for its members.
std::string input_key(const std::string& module);

struct InputHessians {
  std::map<const runtime::Linear*, std::size_t> slot;  // the first reader of each input gathers it
  std::map<std::string, std::size_t> of_input;
  std::vector<std::vector<double>> h;  // per slot: [in, in] row-major
  std::vector<std::int64_t> rows;      // per slot: input rows gathered
  std::vector<float> panel;

  explicit InputHessians(const std::vector<runtime::Linear*>& linears);
  std::size_t of(const runtime::Linear& l) const { return of_input.at(input_key(l.module)); }
  // The slot of `module`'s input, or -1 when none of the linears read it.
  std::ptrdiff_t find(const std::string& module) const;
  // Adds `rows` rows of `in` floats to slot `s`'s H (a call's rows, as the hook does).
  void add(std::size_t s, const float* x, std::int64_t rows, std::int64_t in);
  // CausalLM::ActivationHook adding a call's rows to its input's H.
  static void hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows);
};

// The Hessians of `linears`' inputs in `layer`, each sequence's hidden states
// ([tokens, hidden_size] at the layer's input, kept) run through it.
InputHessians gather_hessians(runtime::CausalLM& model, std::int64_t layer, const std::vector<runtime::Linear*>& linears,
                              const std::vector<std::span<const float>>& hidden, std::int64_t hidden_size);

}  // namespace selq::calibration
