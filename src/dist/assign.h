#pragma once
// Work shared among ranks: the largest item first onto the least-loaded rank
// (ties: the earlier item, the lower rank), so every rank computes the same
// assignment from the same sizes with no exchange.
#include <cstdint>
#include <vector>

namespace selq::dist {

std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, int ranks);

}  // namespace selq::dist
