#pragma once
// The planner's side of the report: the Pareto front a sensitivity table
// gives on the source checkpoint (bits per weight vs predicted loss), the
// evaluated models placed against it (mean KL with 95% intervals; uniform
// schemes, hand recipes and planned mixes marked, the reported mix
// highlighted), and each module kind's sensitivity by depth.
#include <optional>
#include <string>

#include "planner/target.h"
#include "report/eval_data.h"
#include "report/manifest_data.h"
#include "report/svg_chart.h"

namespace selq::report {

// plan --sensitivity S --pareto on `source` (default: the manifest's source).
// BadInput naming the table when the source cannot be opened or the table
// is of another model.
planner::TargetResult planner_front(const std::string& sensitivity_path, const planner::SensitivityTable& table,
                                    const ManifestData& manifest, const std::string& source = "");

// Evaluated models (mean KL, intervals) by recipe kind, the reported one
// highlighted; with `plan` of the measured tier (its score is a KL) its
// predicted front too. nullopt when there is nothing to draw.
std::optional<Chart> quality_chart(const EvalData* eval, const planner::TargetResult* plan);

// The predicted front and the uniform formats in the tier's own units.
Chart predicted_front_chart(const planner::TargetResult& plan);

// One line per module kind: layer vs the tier's score under the table's
// most lossy candidate (named in the title).
Chart depth_chart(const planner::SensitivityTable& table);

}  // namespace selq::report
