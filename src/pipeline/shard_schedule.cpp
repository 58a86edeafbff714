#include "pipeline/shard_schedule.h"

#include <algorithm>

#include "quant/row_blocks.h"

namespace selq::pipeline::detail {

namespace {
// A passed-through tensor is split into blocks of whole MiBs.
constexpr std::int64_t kPassThroughAlign = std::int64_t{1} << 20;

struct Blocking {
  std::int64_t units{0}, align{0};
};

// How a planned tensor may be split (align 0: not at all).
Blocking blocking_of(const PlannedTensor& t) {
  if (t.stored) return {};  // dequantized to F32 whole (requantize_source)
  if (!t.scheme) return {static_cast<std::int64_t>(t.in_bytes()), kPassThroughAlign};
  const auto b = quant::row_blocking(*t.scheme, t.source_info.shape);
  return {b.units, b.align};
}

std::uint64_t share(std::uint64_t total, std::int64_t units, std::int64_t n) {
  return static_cast<std::uint64_t>(static_cast<double>(total) * static_cast<double>(n) / static_cast<double>(units));
}
}  // namespace

std::uint64_t item_output_bytes(const PlannedTensor& t, const WorkItem& item) {
  if (!t.scheme) return 0;  // written from the source
  if (!item.block) return t.out_bytes();
  return share(t.out_bytes(), blocking_of(t).units, item.u1 - item.u0);
}

std::uint64_t item_bytes(const PlannedTensor& t, const WorkItem& item) {
  const std::uint64_t in = item.block ? share(t.in_bytes(), blocking_of(t).units, item.u1 - item.u0) : t.in_bytes();
  // A re-quantized tensor also holds its F32 dequantization.
  const std::uint64_t f32 = t.stored ? 4 * shape_numel(t.source_info.shape) : 0;
  return in + f32 + item_output_bytes(t, item);
}

ShardSchedule schedule_shard(const Plan& plan, const PlannedShard& shard, bool splittable, std::uint64_t budget,
                             std::size_t workers) {
  const std::uint64_t for_items = budget > kBudgetReserve ? budget - kBudgetReserve : budget / 2;
  // The share of one item when workers + 1 are in flight: one per worker
  // and one waiting for the writer.
  const std::uint64_t cap = std::max<std::uint64_t>(1, for_items / (workers + 1));
  ShardSchedule s;
  for (const auto i : shard.tensors) {
    const PlannedTensor& t = plan.tensors[i];
    const Blocking b = splittable ? blocking_of(t) : Blocking{};
    const std::uint64_t bytes = item_bytes(t, {i});
    if (b.align == 0 || bytes <= cap || b.units <= b.align) {
      s.items.push_back({i});
      continue;
    }
    const double per_unit = static_cast<double>(bytes) / static_cast<double>(b.units);
    const auto fit = static_cast<std::int64_t>(static_cast<double>(cap) / per_unit);
    const std::int64_t n = std::max(b.align, fit / b.align * b.align);
    for (std::int64_t u0 = 0; u0 < b.units; u0 += n) s.items.push_back({i, true, u0, std::min(b.units, u0 + n)});
  }
  // More than workers + 1 tokens while 32 MiB of outputs allows: the writer
  // is one thread, and while it writes a large passed-through tensor (an
  // embedding) the workers only go on quantizing if there are tokens left;
  // with workers + 1, one core sat idle for the ~50 ms an embedding of the
  // 0.27 GB model takes to write.
  constexpr std::uint64_t kManyOutputBytes = std::uint64_t{32} << 20;
  constexpr std::size_t kMaxTokens = 64;
  std::uint64_t largest_out = 1, largest = 1;
  for (const auto& item : s.items) {
    const PlannedTensor& t = plan.tensors[item.tensor];
    // A downloaded passed-through tensor holds its bytes until written.
    largest_out = std::max(largest_out, t.scheme ? item_output_bytes(t, item) : (splittable ? 0 : t.in_bytes()));
    largest = std::max(largest, item_bytes(t, item));
  }
  s.tokens = std::clamp<std::size_t>(static_cast<std::size_t>(kManyOutputBytes / largest_out), workers + 1,
                                     std::max(kMaxTokens, workers + 1));
  s.tokens = std::clamp<std::size_t>(static_cast<std::size_t>(for_items / largest), 1, s.tokens);
  return s;
}

}  // namespace selq::pipeline::detail
