#pragma once
// The data-free tier over the ranks of an mpirun/srun job: the units are
// shared by weight bytes (dist::assign_largest_first), each rank scores its
// own, and rank 0 gets the whole table in the layout's order, the scores
// those of one process (the other ranks get an empty table).
#include "dist/ranks.h"
#include "planner/sensitivity.h"

namespace selq::planner {

SensitivityTable data_free_sensitivity_on_ranks(const io::Checkpoint& checkpoint, const UnitLayout& layout,
                                                const std::vector<Candidate>& candidates,
                                                const SensitivityOptions& options, dist::Ranks& ranks);

}  // namespace selq::planner
