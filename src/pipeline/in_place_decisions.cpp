#include "pipeline/in_place_decisions.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fs = std::filesystem;

namespace selq::pipeline::detail {

bool is_finished_in_place_run(const std::string& manifest_text, const recipe::Recipe& recipe) {
  nlohmann::json m = nlohmann::json::parse(manifest_text, nullptr, /*allow_exceptions=*/false);
  if (m.is_discarded() || !m.value("in_place", false) || !m.contains("recipe")) return false;
  return m["recipe"].value("text", "") == recipe.text && m.value("selq_version", "") == SELQ_VERSION;
}

void refuse_in_place_requantize(const Plan& plan, const std::string& dir) {
  for (const auto& t : plan.tensors)
    if (t.stored)
      throw_unsupported("re-quantizing pre-quantized modules (requantize: true) is supported file-to-file only, "
                        "not in place",
                        {dir, t.source});
}

void check_in_place_start(const Plan& plan, const InPlaceStart& found, const std::string& dir) {
  if (found.journal_other_fingerprint && !found.journal_resumed)
    throw_bad_input(
        "an interrupted in-place run with a different recipe or selq version is in progress here; "
        "re-run it with its original recipe to finish it",
        {found.journal_path});
  // Each rank rewrites one shard at a time, next to the original until its rename.
  const std::uint64_t need =
      plan.largest_output_shard_bytes() *
      static_cast<std::uint64_t>(std::min<std::size_t>(static_cast<std::size_t>(found.ranks), plan.shards.size()));
  if (found.free_bytes < need + (16u << 20))
    throw_io(fmt::format("not enough free space for an in-place run: one rewritten shard needs up to {} bytes, "
                         "{} are free",
                         need, found.free_bytes),
             {dir});
}

std::vector<ShardAction> in_place_shard_actions(const Plan& plan, const std::vector<LiveShard>& found,
                                                const std::string& dir) {
  std::vector<ShardAction> actions(plan.shards.size(), ShardAction::None);
  for (std::size_t s = 0; s < plan.shards.size(); ++s) {
    switch (found.at(s)) {
      case LiveShard::OtherRank: break;
      case LiveShard::Committed: actions[s] = ShardAction::Adopt; break;
      case LiveShard::Original: actions[s] = ShardAction::Rewrite; break;
      case LiveShard::Neither:
        throw_bad_input("shard is neither the original nor the journaled rewrite; refusing to continue",
                        {(fs::path(dir) / plan.shards[s].name).string()});
    }
  }
  return actions;
}

}  // namespace selq::pipeline::detail
