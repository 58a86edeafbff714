#pragma once
// What an in-place run decides from what it finds in the directory: whether a
// finished run is there, whether this run may start, and which of a rank's
// shards it adopts, rewrites or refuses. quantize_in_place.cpp gathers the
// facts (files, journal, free space); these only decide, so unit tests can
// give them any state.
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/plan.h"
#include "recipe/recipe.h"

namespace selq::pipeline::detail {

// True when `manifest_text` (the directory's selq manifest) is that of a
// finished in-place run of `recipe` by this selq version: rerunning the
// command has nothing left to do.
bool is_finished_in_place_run(const std::string& manifest_text, const recipe::Recipe& recipe);

// Throws Unsupported when the plan re-quantizes a pre-quantized module: its
// inputs may span shards rewritten at different times (file-to-file only).
void refuse_in_place_requantize(const Plan& plan, const std::string& dir);

// What rank 0 finds before anything is written.
struct InPlaceStart {
  bool journal_resumed{false};            // a journal with this plan's fingerprint
  bool journal_other_fingerprint{false};  // one from another recipe or selq version
  std::string journal_path;               // named when refusing
  std::uint64_t free_bytes{0};            // on the checkpoint's file system
  int ranks{1};
};
// Throws BadInput when an interrupted run of another recipe or selq version
// is in progress, and Io when the shards the ranks rewrite at once (plus a
// 16 MiB margin) do not fit in the free space.
void check_in_place_start(const Plan& plan, const InPlaceStart& found, const std::string& dir);

// One planned shard as this rank finds it on disk.
enum class LiveShard {
  OtherRank,  // another rank's: not looked at
  Committed,  // the journaled rewrite, with its recorded hash
  Original,   // the original's size and header
  Neither,
};
enum class ShardAction { None, Adopt, Rewrite };  // None: another rank's
// Per plan shard: adopt the committed rewrite, rewrite the original. Throws
// BadInput naming the first shard that is neither.
std::vector<ShardAction> in_place_shard_actions(const Plan& plan, const std::vector<LiveShard>& found,
                                                const std::string& dir);

}  // namespace selq::pipeline::detail
