// The in-place run's decisions (pipeline/in_place_decisions.h): when a
// finished run is recognized, when a run may not start, and which shards it
// adopts, rewrites or refuses. The plan is made from a synthetic llama
// written in the test; the directory's state is given, not staged on disk.
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "pipeline/in_place_decisions.h"
#include "pipeline/plan.h"
#include "pipeline/synth.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {
namespace {

constexpr std::uint64_t kMargin = 16u << 20;  // what the free-space check keeps in reserve

// A two-layer llama (hidden 576, vocab 1024) in source shards of at most 2 MB.
class InPlaceDecisions : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("selq-in-place-decisions-{}", ::getpid()));
    fs::remove_all(*dir_);
    SynthOptions o;
    o.arch = "llama";
    o.layers = 2;
    o.vocab = 1024;
    o.max_shard_bytes = 2u << 20;
    write_synth_checkpoint(o, dir_->string());
    const auto ckpt = io::Checkpoint::open(dir_->string());
    plan_ = new Plan(make_plan(*ckpt, recipe_of(), {}));
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete plan_;
    delete dir_;
  }
  static recipe::Recipe recipe_of(const std::string& scheme = "fp8-channel") {
    return recipe::parse_recipe(
        fmt::format("name: t\narch: llama\ndialect: compressed-tensors\ndefault:\n  scheme: {}\n", scheme), "t.yaml");
  }
  static const Plan& plan() { return *plan_; }
  static std::string dir() { return dir_->string(); }
  // The start facts of a first run with room for `ranks` rewritten shards at once.
  static InPlaceStart roomy(int ranks = 1) {
    InPlaceStart f;
    f.journal_path = dir() + "/.selq-inplace/journal";
    f.ranks = ranks;
    f.free_bytes = plan().largest_output_shard_bytes() * static_cast<std::uint64_t>(ranks) + kMargin;
    return f;
  }
  static fs::path* dir_;
  static Plan* plan_;
};
fs::path* InPlaceDecisions::dir_ = nullptr;
Plan* InPlaceDecisions::plan_ = nullptr;

// The Error `f` throws (fails the test when it throws none).
template <class F>
Error thrown_by(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no selq::Error thrown";
  return Error(ErrorKind::Internal, "none");
}

std::string manifest(bool in_place, const std::string& recipe_text, const std::string& version) {
  return nlohmann::json{{"in_place", in_place}, {"selq_version", version}, {"recipe", {{"text", recipe_text}}}}
      .dump();
}

TEST_F(InPlaceDecisions, AFinishedRunIsThisRecipesInPlaceManifestFromThisVersion) {
  const auto r = recipe_of();
  EXPECT_TRUE(is_finished_in_place_run(manifest(true, r.text, SELQ_VERSION), r));
  EXPECT_FALSE(is_finished_in_place_run(manifest(false, r.text, SELQ_VERSION), r)) << "a file-to-file run's";
  EXPECT_FALSE(is_finished_in_place_run(manifest(true, recipe_of("fp8-tensor").text, SELQ_VERSION), r));
  EXPECT_FALSE(is_finished_in_place_run(manifest(true, r.text, "0.0.0-other"), r));
  EXPECT_FALSE(is_finished_in_place_run(R"({"in_place": true, "selq_version": ")" SELQ_VERSION R"("})", r))
      << "no recipe";
  EXPECT_FALSE(is_finished_in_place_run("{\"in_place\": tru", r)) << "a manifest cut short";
}

TEST_F(InPlaceDecisions, RefusesToReQuantizeAPreQuantizedModule) {
  EXPECT_NO_THROW(refuse_in_place_requantize(plan(), dir()));
  Plan p = plan();
  ASSERT_GT(p.tensors.size(), 3u);
  p.tensors[3].stored = StoredWeight{};
  const Error e = thrown_by([&] { refuse_in_place_requantize(p, dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
  EXPECT_EQ(e.where().file, dir());
  EXPECT_EQ(e.where().tensor, p.tensors[3].source);
}

TEST_F(InPlaceDecisions, StartsWhenNoOtherRunIsInProgressAndTheShardsFit) {
  EXPECT_NO_THROW(check_in_place_start(plan(), roomy(), dir()));
  InPlaceStart resumed = roomy();
  resumed.journal_resumed = true;
  EXPECT_NO_THROW(check_in_place_start(plan(), resumed, dir()));
}

TEST_F(InPlaceDecisions, RefusesWhileAnotherRecipesRunIsInterrupted) {
  InPlaceStart f = roomy();
  f.journal_other_fingerprint = true;
  const Error e = thrown_by([&] { check_in_place_start(plan(), f, dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::BadInput);
  EXPECT_EQ(e.where().file, f.journal_path);
  // A rank's journal of another fingerprint beside this run's own is no conflict.
  f.journal_resumed = true;
  EXPECT_NO_THROW(check_in_place_start(plan(), f, dir()));
}

TEST_F(InPlaceDecisions, NeedsRoomForTheShardsTheRanksRewriteAtOnce) {
  const std::uint64_t largest = plan().largest_output_shard_bytes();
  ASSERT_GT(largest, 0u);
  InPlaceStart f = roomy();
  --f.free_bytes;
  const Error e = thrown_by([&] { check_in_place_start(plan(), f, dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::Io);
  EXPECT_EQ(e.where().file, dir());
  EXPECT_NE(e.message().find(fmt::format("needs up to {} bytes, {} are free", largest, f.free_bytes)),
            std::string::npos)
      << e.message();

  // Two ranks rewrite two shards at once.
  EXPECT_NO_THROW(check_in_place_start(plan(), roomy(2), dir()));
  f = roomy(2);
  f.free_bytes = largest + kMargin;
  EXPECT_THROW(check_in_place_start(plan(), f, dir()), Error);

  // More ranks than shards rewrite every shard at once, no more.
  const int shards = static_cast<int>(plan().shards.size());
  f = roomy(shards);
  f.ranks = shards + 5;
  EXPECT_NO_THROW(check_in_place_start(plan(), f, dir()));
  --f.free_bytes;
  EXPECT_THROW(check_in_place_start(plan(), f, dir()), Error);
}

TEST_F(InPlaceDecisions, AdoptsCommittedShardsRewritesOriginalsAndSkipsOtherRanks) {
  const std::size_t n = plan().shards.size();
  ASSERT_GE(n, 3u);
  std::vector<LiveShard> found(n, LiveShard::OtherRank);
  found[0] = LiveShard::Committed;
  found[1] = LiveShard::Original;
  found[n - 1] = LiveShard::Committed;
  const auto actions = in_place_shard_actions(plan(), found, dir());
  ASSERT_EQ(actions.size(), n);
  EXPECT_EQ(actions[0], ShardAction::Adopt);
  EXPECT_EQ(actions[1], ShardAction::Rewrite);
  for (std::size_t s = 2; s + 1 < n; ++s) EXPECT_EQ(actions[s], ShardAction::None) << s;
  EXPECT_EQ(actions[n - 1], ShardAction::Adopt);
}

TEST_F(InPlaceDecisions, RefusesAShardThatIsNeitherOriginalNorJournaled) {
  const std::size_t n = plan().shards.size();
  ASSERT_GE(n, 3u);
  std::vector<LiveShard> found(n, LiveShard::Original);
  found[0] = LiveShard::Committed;
  found[1] = LiveShard::Neither;
  found[2] = LiveShard::Neither;
  const Error e = thrown_by([&] { in_place_shard_actions(plan(), found, dir()); });
  EXPECT_EQ(e.kind(), ErrorKind::BadInput);
  EXPECT_EQ(e.where().file, (fs::path(dir()) / plan().shards[1].name).string()) << "the first such shard";
}

}  // namespace
}  // namespace selq::pipeline::detail
