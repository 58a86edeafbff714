#pragma once
// How a shard's tensors go through the pipeline within the memory budget:
// the items (whole tensors, or row blocks of the large ones) and how many are
// in flight at once.
#include <cstdint>
#include <vector>

#include "pipeline/plan.h"

namespace selq::pipeline::detail {

// A whole tensor, or the units [u0, u1) of it (rows or experts of a
// quantized tensor, quant/row_blocks.h; bytes of a passed-through one).
struct WorkItem {
  std::size_t tensor{0};
  bool block{false};
  std::int64_t u0{0}, u1{0};
  bool first() const { return !block || u0 == 0; }
};

struct ShardSchedule {
  std::vector<WorkItem> items;
  std::size_t tokens{1};
};

// Anonymous memory the rest of a run holds besides the items in flight (the
// plan, records, thread stacks and arenas): the budget left for the items is
// the budget less this.
constexpr std::uint64_t kBudgetReserve = std::uint64_t{32} << 20;

// `splittable`: the source is local mappings (a remote tensor is one download,
// fetched once). Memory: tokens x the largest item (its source pages and
// output buffers) stays within budget - kBudgetReserve, unless one block of
// the scheme's row alignment is larger than that share (then one item of it).
ShardSchedule schedule_shard(const Plan& plan, const PlannedShard& shard, bool splittable, std::uint64_t budget,
                             std::size_t workers);

// What an item holds while in flight: its source bytes and its output bytes.
std::uint64_t item_bytes(const PlannedTensor& t, const WorkItem& item);
std::uint64_t item_output_bytes(const PlannedTensor& t, const WorkItem& item);

}  // namespace selq::pipeline::detail
