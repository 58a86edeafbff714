#pragma once
// Speculative-decoding acceptance of a draft model for a base model (the
// `acc` columns of `selq eval`): greedy drafts of k tokens, verified by the
// base in one pass. Prompts run in batches in lockstep, one sequence slot of
// each model per prompt (CausalLM::forward_steps), so every weight is read
// once per step for the whole batch; the decode products are rowwise, so each
// prompt's numbers are the same bits whatever the batch size.
#include <cstdint>
#include <functional>
#include <set>
#include <vector>

#include "runtime/model/causal_lm.h"

namespace selq::runtime {

struct SpecStats {
  std::int64_t steps{0};  // verification steps
  double greedy{0};       // draft tokens accepted, greedy verification, summed over steps
  double expected{0};     // E[accepted] under rejection sampling at T=1, summed over steps
};

struct SpecOptions {
  int draft_k{7};              // draft tokens per verification step
  std::int64_t gen_tokens{32};  // tokens generated per prompt
  int batch{16};               // prompts run together (at most the models' max_slots)
};

// One SpecStats per prompt (all zero for a prompt of fewer than 2 tokens);
// generation stops at a token of `stop`. `done(n)` after each batch of n prompts.
std::vector<SpecStats> speculate_prompts(CausalLM& base, CausalLM& draft,
                                         const std::vector<std::vector<std::int32_t>>& prompts,
                                         const std::set<std::int32_t>& stop, const SpecOptions& o,
                                         const std::function<void(std::size_t)>& done);

}  // namespace selq::runtime
