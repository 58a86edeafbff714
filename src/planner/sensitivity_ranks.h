#pragma once
// The sensitivity tiers over the ranks of an mpirun/srun job: the units are
// shared by weight bytes (dist::assign_largest_first), each rank scores its
// own, and rank 0 gets the whole table in the layout's order, the scores
// those of one process (the other ranks get an empty table).
#include "dist/ranks.h"
#include "planner/runtime_tiers.h"
#include "planner/sensitivity.h"

namespace selq::planner {

SensitivityTable data_free_sensitivity_on_ranks(const io::Checkpoint& checkpoint, const UnitLayout& layout,
                                                const std::vector<Candidate>& candidates,
                                                const SensitivityOptions& options, dist::Ranks& ranks);

// add_runtime_tiers on `table` (rank 0's data-free table; empty on the others,
// which receive it): every rank runs the model on the calibration text and
// scores and measures its own units; rank 0 gathers them and fits the measured
// tier's rest (fit_unmeasured) from every unit's measurements, as one process does.
void add_runtime_tiers_on_ranks(SensitivityTable& table, const UnitLayout& layout,
                                const std::vector<Candidate>& candidates, const std::string& checkpoint_dir,
                                const CalibrationText& text, Tier tier, const RuntimeTierOptions& options,
                                dist::Ranks& ranks);

}  // namespace selq::planner
