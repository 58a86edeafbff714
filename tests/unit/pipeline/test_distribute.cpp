// How the ranks of an mpirun job share a run (pipeline/distribute.h,
// dist/assign.h): the assignment every rank computes alone, the fused groups
// that need an exchange, and journals that a rerun with another rank count merges.
#include <filesystem>

#include <gtest/gtest.h>
#include <unistd.h>

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
  EXPECT_EQ(pipeline::detail::groups_across_ranks(plan, {0, 1, 0}), (std::vector<std::string>{"l0.qkv"}));
  EXPECT_TRUE(pipeline::detail::groups_across_ranks(plan, {0, 0, 1}).empty());
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
