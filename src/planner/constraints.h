#pragma once
// Serving constraints on the choice: with an FP8 KV cache and FP8 prefill
// queries, MLA attention hands kv_b_proj and o_proj FP8 activations, so a
// candidate that quantizes activations is not allowed there (the recipe
// module's rule, recipe/resolve.cpp). The planner asks that rule itself, so
// the two cannot disagree.
#include <set>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "planner/candidates.h"
#include "planner/units.h"

namespace selq::planner {

struct ServingContext {
  std::string arch;              // template family of the emitted recipe ("" none)
  bool fp8_kv_cache{false};
  bool fp8_prefill_query{false};
  bool constrains() const { return fp8_kv_cache || fp8_prefill_query; }
};

// Per unit (layout order), the candidate ids the recipe rules refuse for it.
std::vector<std::set<std::string>> forbidden_candidates(const io::Checkpoint& checkpoint, const UnitLayout& layout,
                                                        const std::vector<Candidate>& candidates,
                                                        const ServingContext& serving);

}  // namespace selq::planner
