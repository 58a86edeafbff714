#pragma once
// Work shared among ranks: the largest item first onto the least-loaded rank
// (ties: the earlier item, the lower rank), so every rank computes the same
// assignment from the same sizes with no exchange.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace selq::dist {

std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, int ranks);

// The same, onto ranks already carrying `load` (one entry per rank), which it
// updates: items given batch by batch (a shard's tensors, shard after shard)
// stay balanced over all batches, so at every batch's end the loads differ by
// at most the largest item given so far.
std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, std::vector<std::uint64_t>& load);

// Items [first, last) of `n` in order for rank `rank` of `ranks`: contiguous
// shares in rank order, sizes differing by at most one (what keeps an ordered
// sum, read back rank by rank, in one process's order).
struct Share {
  std::size_t first, last;
};
Share contiguous_share(std::size_t n, int rank, int ranks);

}  // namespace selq::dist
