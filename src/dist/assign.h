#pragma once
// Work shared among ranks: the largest item first onto the least-loaded rank
// (ties: the earlier item, the lower rank), so every rank computes the same
// assignment from the same sizes with no exchange.
#include <cstdint>
#include <vector>

namespace selq::dist {

std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, int ranks);

// The same, onto ranks already carrying `load` (one entry per rank), which it
// updates: items given batch by batch (a shard's tensors, shard after shard)
// stay balanced over all batches, so at every batch's end the loads differ by
// at most the largest item given so far.
std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, std::vector<std::uint64_t>& load);

}  // namespace selq::dist
