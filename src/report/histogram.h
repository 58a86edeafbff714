#pragma once
// A histogram as SVG bars over given bin edges, drawn with equal widths (the
// eval's per-position KL bins are log-spaced, runtime/eval/eval_stats.h).
#include <cstdint>
#include <string>
#include <vector>

namespace selq::report {

// Bars for the bins from the first to the last non-empty one, heights as
// fractions of all counts. BadInput when edges.size() != counts.size() + 1
// or every count is 0.
std::string render_histogram(const std::string& id, const std::string& title, const std::string& x_label,
                             const std::vector<double>& edges, const std::vector<std::int64_t>& counts);

}  // namespace selq::report
