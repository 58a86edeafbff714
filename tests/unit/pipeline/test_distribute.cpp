// How the ranks of an mpirun job share a run (pipeline/distribute.h,
// dist/assign.h): the assignment every rank computes alone, the fused groups
// that need an exchange, and journals that a rerun with another rank count merges.
#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "dist/assign.h"
#include "dist/ranks.h"
#include "io/atomic_file.h"
#include "pipeline/distribute.h"
#include "pipeline/journal.h"

namespace fs = std::filesystem;
using namespace selq;

TEST(Distribute, LargestFirstOntoLeastLoaded) {
  // 9, 7, 5, 4, 3 over two ranks: 9->0, 7->1, 5->1 (7 < 9), 4->0 (9 < 12), 3->1 (12 < 13).
  EXPECT_EQ(dist::assign_largest_first({5, 9, 3, 7, 4}, 2), (std::vector<int>{1, 0, 1, 1, 0}));
  // Equal sizes: in order, to the lowest rank first (ties are deterministic).
  EXPECT_EQ(dist::assign_largest_first({1, 1, 1, 1}, 3), (std::vector<int>{0, 1, 2, 0}));
  EXPECT_EQ(dist::assign_largest_first({4, 2, 8}, 1), (std::vector<int>{0, 0, 0}));
  // More ranks than items: one each, the rest idle.
  EXPECT_EQ(dist::assign_largest_first({2, 3}, 4), (std::vector<int>{1, 0}));
}

TEST(Distribute, ContiguousSharesCoverEveryItemOnceInRankOrder) {
  for (const std::size_t n : {0u, 1u, 7u, 8u, 17u})
    for (int ranks = 1; ranks <= 5; ++ranks) {
      std::size_t next = 0;  // each share starts where the one before ended
      for (int r = 0; r < ranks; ++r) {
        const dist::Share s = dist::contiguous_share(n, r, ranks);
        EXPECT_EQ(s.first, next) << n << " " << r << "/" << ranks;
        EXPECT_LE(s.last - s.first, n / static_cast<std::size_t>(ranks) + 1);
        EXPECT_GE(s.last - s.first, n / static_cast<std::size_t>(ranks));
        next = s.last;
      }
      EXPECT_EQ(next, n);
    }
  EXPECT_EQ(dist::contiguous_share(8, 1, 3).first, 2u);  // 8 over 3: [0,2) [2,5) [5,8)
  EXPECT_EQ(dist::contiguous_share(8, 1, 3).last, 5u);
}

TEST(Distribute, SingleProcessIsOneRank) {
  EXPECT_EQ(dist::ranks().size(), 1);
  EXPECT_EQ(dist::rank_prefix(), "");
  std::vector<float> v{1.5f, -2.0f};
  dist::ranks().max_floats(v);
  EXPECT_EQ(v, (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(dist::ranks().gather_text("x"), (std::vector<std::string>{"x"}));
}

TEST(Distribute, GroupsAcrossRanks) {
  pipeline::Plan plan;
  for (const char* g : {"l0.qkv", "l0.qkv", "l0.qkv", "l1.qkv", "l1.qkv", ""}) {
    pipeline::PlannedTensor t;
    t.fused_group = g;
    plan.tensors.push_back(t);
  }
  plan.shards = {{"a", {0, 1}}, {"b", {2, 3, 4}}, {"c", {5}}};
  // By plan tensor: shards a, b, c on ranks 0, 1, 0, then 0, 0, 1.
  EXPECT_EQ(pipeline::detail::groups_across_ranks(plan, {0, 0, 1, 1, 1, 0}), (std::vector<std::string>{"l0.qkv"}));
  EXPECT_TRUE(pipeline::detail::groups_across_ranks(plan, {0, 0, 0, 0, 0, 1}).empty());
}

TEST(Distribute, LargestFirstWithLoadsAcrossBatches) {
  // Batches given one after another onto the same loads: every item gets one
  // valid rank, the result repeats exactly, and after each batch the loads
  // differ by at most the largest item so far.
  std::uint64_t seed = 12345;
  const auto next = [&] { return (seed = seed * 6364136223846793005ull + 1442695040888963407ull) >> 40; };
  for (const int ranks : {2, 3, 5}) {
    std::vector<std::uint64_t> load(static_cast<std::size_t>(ranks), 0), again = load;
    std::uint64_t largest = 0, total = 0;
    for (int batch = 0; batch < 20; ++batch) {
      std::vector<std::uint64_t> sizes(1 + next() % 9);
      for (auto& x : sizes) x = 1 + next() % 1000;
      const auto r = dist::assign_largest_first(sizes, load);
      EXPECT_EQ(dist::assign_largest_first(sizes, again), r);
      ASSERT_EQ(r.size(), sizes.size());
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        ASSERT_GE(r[i], 0);
        ASSERT_LT(r[i], ranks);
        largest = std::max(largest, sizes[i]);
        total += sizes[i];
      }
      std::uint64_t sum = 0;
      for (const auto l : load) sum += l;
      EXPECT_EQ(sum, total);  // each item counted once
      const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
      EXPECT_LE(*hi - *lo, largest) << "ranks " << ranks << " batch " << batch;
    }
    EXPECT_EQ(load, again);
  }
}

namespace {
// A plan of `shards` shards of the given tensor sizes (BF16 elements, passed
// through), with tensors named by `group` sharing a fused group.
pipeline::Plan sized_plan(const std::vector<std::vector<std::int64_t>>& shards,
                          const std::map<std::size_t, std::string>& group = {}) {
  pipeline::Plan plan;
  for (std::size_t s = 0; s < shards.size(); ++s) {
    pipeline::PlannedShard shard{fmt::format("s{}", s), {}};
    for (const auto n : shards[s]) {
      pipeline::PlannedTensor t;
      t.source = fmt::format("t{}", plan.tensors.size());
      t.source_info = TensorInfo{t.source, DType::BF16, {n}};
      t.outputs.push_back({t.source_info, std::nullopt});
      if (group.count(plan.tensors.size())) t.fused_group = group.at(plan.tensors.size());
      shard.tensors.push_back(plan.tensors.size());
      plan.tensors.push_back(t);
    }
    plan.shards.push_back(shard);
  }
  return plan;
}

std::vector<std::uint64_t> rank_loads(const pipeline::Plan& plan, const std::vector<int>& tensor_rank, int ranks) {
  std::vector<std::uint64_t> load(static_cast<std::size_t>(ranks), 0);
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    load[static_cast<std::size_t>(tensor_rank[i])] += plan.tensors[i].in_bytes() + plan.tensors[i].out_bytes();
  return load;
}
}  // namespace

TEST(Distribute, ByTensorWhenShardsAreFewerThanRanks) {
  const auto plan = sized_plan({{100, 90, 80, 70, 60, 50, 40}});
  for (const int ranks : {2, 3}) {
    const auto a = pipeline::detail::assign_work(plan, ranks);
    EXPECT_TRUE(a.by_tensor);
    EXPECT_EQ(a.shard_rank, std::vector<int>{0});  // rank 0 commits the one shard
    EXPECT_EQ(a.tensor_rank, pipeline::detail::assign_work(plan, ranks).tensor_rank);
    const auto load = rank_loads(plan, a.tensor_rank, ranks);
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 100u * 2 * 2);  // within the largest tensor (in + out bytes)
  }
  const auto one = pipeline::detail::assign_work(plan, 1);
  EXPECT_FALSE(one.by_tensor);
  EXPECT_EQ(one.tensor_rank, std::vector<int>(7, 0));
}

TEST(Distribute, ByShardWhileShardsBalance) {
  // Four equal shards on two ranks: whole shards are an even split.
  const auto plan = sized_plan({{50, 50}, {50, 50}, {50, 50}, {50, 50}});
  const auto a = pipeline::detail::assign_work(plan, 2);
  EXPECT_FALSE(a.by_tensor);
  for (std::size_t s = 0; s < plan.shards.size(); ++s)
    for (const auto i : plan.shards[s].tensors) EXPECT_EQ(a.tensor_rank[i], a.shard_rank[s]);
  // --split-by chooses: tensor spreads them anyway, shard keeps whole shards
  // even with fewer shards than ranks.
  EXPECT_TRUE(pipeline::detail::assign_work(plan, 2, "tensor").by_tensor);
  EXPECT_FALSE(pipeline::detail::assign_work(sized_plan({{10, 20}}), 3, "shard").by_tensor);
  EXPECT_THROW(pipeline::detail::assign_work(plan, 2, "row"), Error);
}

TEST(Distribute, ByTensorWhenWholeShardsWouldBeUneven) {
  // Three shards on two ranks: whole, one rank gets 2 of 3 equal shards (a
  // sixth over its half, more than a tensor); by tensor, every shard is
  // spread and the totals differ by at most one tensor.
  const auto plan = sized_plan({{40, 30, 20, 10}, {40, 30, 20, 10}, {40, 30, 20, 10}});
  const auto a = pipeline::detail::assign_work(plan, 2);
  ASSERT_TRUE(a.by_tensor);
  EXPECT_EQ(a.shard_rank, (std::vector<int>{0, 0, 0}));
  const auto load = rank_loads(plan, a.tensor_rank, 2);
  EXPECT_LE(std::max(load[0], load[1]) - std::min(load[0], load[1]), 40u * 2 * 2);
  for (const auto& shard : plan.shards) {  // both ranks have a part of every shard
    std::set<int> ranks;
    for (const auto i : shard.tensors) ranks.insert(a.tensor_rank[i]);
    EXPECT_EQ(ranks.size(), 2u);
  }
}

TEST(Distribute, FusedMembersOfAShardStayTogether) {
  // Tensors 1 and 2 (one shard) are one fused group, 3 and 4 another that
  // spans two shards: the first pair goes to one rank (no amax exchange, no
  // second read); the second may be split.
  const auto plan = sized_plan({{30, 30, 30, 10}, {30, 5}}, {{1, "g"}, {2, "g"}, {3, "h"}, {4, "h"}});
  for (const int ranks : {2, 3}) {
    const auto a = pipeline::detail::assign_work(plan, ranks);
    ASSERT_TRUE(a.by_tensor);
    EXPECT_EQ(a.tensor_rank[1], a.tensor_rank[2]);
    const auto groups = pipeline::detail::groups_across_ranks(plan, a.tensor_rank);
    EXPECT_EQ(std::count(groups.begin(), groups.end(), "g"), 0);
  }
}

TEST(Distribute, JournalsOfOtherRanksAreMerged) {
  const fs::path dir = fs::temp_directory_path() / ("selq_distribute_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  using pipeline::detail::journal_file;
  const std::string j0 = journal_file(dir.string(), "j", 0), j2 = journal_file(dir.string(), "j", 2);
  EXPECT_EQ(fs::path(j0).filename(), "j.json");
  EXPECT_EQ(fs::path(j2).filename(), "j.r2.json");
  {
    pipeline::Journal rank2(j2, "fp");
    pipeline::TensorRecord r;
    r.source = "w";
    rank2.record_intent("s2.safetensors", 42, {{7, r}});
    pipeline::Journal stale(journal_file(dir.string(), "j", 1), "other plan");
    stale.record_intent("s1.safetensors", 1, {});
  }
  io::write_file_atomic((dir / "j.rX.txt").string(), "not a journal\n");
  const auto files = pipeline::detail::journal_files(dir.string(), "j");
  EXPECT_EQ(files.size(), 2u);  // rank 0 has none yet
  pipeline::Journal rank0(j0, "fp", files);
  EXPECT_TRUE(rank0.resumed());
  ASSERT_EQ(rank0.records("s2.safetensors").size(), 1u);
  EXPECT_EQ(rank0.records("s2.safetensors")[0].first, 7u);
  EXPECT_THROW(rank0.records("s1.safetensors"), std::exception);  // another plan's entry is not taken
  // Saved in rank 0's own file: a third run finds it there.
  pipeline::Journal again(j0, "fp");
  EXPECT_EQ(again.records("s2.safetensors").size(), 1u);
  fs::remove_all(dir);
}
