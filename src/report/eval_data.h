#pragma once
// The rows of a `selq eval --json` (or `selq demo`) file the report shows:
// each model's size, bits per weight and quality with its 95% intervals,
// the per-position KL histogram, and what kind of recipe made it (read from
// the model's own manifest, where it is still on disk).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/eval/eval_stats.h"

namespace selq::report {

enum class RecipeKind { Uniform, Hand, Planned, Unknown };
std::string recipe_kind_name(RecipeKind k);  // "uniform scheme", "hand recipe", "planned mix", "evaluated"

struct EvalRow {
  std::string name, path;
  bool base{false};
  std::uint64_t stored_bytes{0};
  double bits_per_weight{0}, perplexity{0}, kl_p99{0};
  runtime::Interval ppl_ratio, kl_mean, top1, accepted_greedy, accepted_expected;
  bool has_acceptance{false};
  std::vector<double> kl_edges;  // empty: the file has no histogram
  std::vector<std::int64_t> kl_counts;
  RecipeKind kind{RecipeKind::Unknown};
  std::string recipe;  // recipe name, where known
};

struct EvalData {
  std::string path, text_source;
  std::int64_t text_tokens{0}, context{0};
  std::vector<EvalRow> rows;  // base first
  std::size_t self{0};        // the row of the reported checkpoint
};

// BadInput (one line) when the file is not an eval JSON or none of its
// quantized models is `checkpoint_dir` (an eval of another model).
EvalData load_eval(const std::string& path, const std::string& checkpoint_dir);

}  // namespace selq::report
