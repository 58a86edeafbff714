#include "dist/assign.h"

#include <algorithm>
#include <numeric>

namespace selq::dist {

std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, int ranks) {
  std::vector<std::uint64_t> load(static_cast<std::size_t>(std::max(ranks, 1)), 0);
  return assign_largest_first(sizes, load);
}

std::vector<int> assign_largest_first(const std::vector<std::uint64_t>& sizes, std::vector<std::uint64_t>& load) {
  if (load.empty()) load.assign(1, 0);
  std::vector<std::size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sizes[a] > sizes[b]; });
  std::vector<int> rank_of(sizes.size(), 0);
  for (const auto i : order) {
    const auto r = static_cast<std::size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    rank_of[i] = static_cast<int>(r);
    load[r] += sizes[i];
  }
  return rank_of;
}

Share contiguous_share(std::size_t n, int rank, int ranks) {
  const auto r = static_cast<std::size_t>(rank), k = static_cast<std::size_t>(std::max(ranks, 1));
  return {n * r / k, n * (r + 1) / k};
}

}  // namespace selq::dist
