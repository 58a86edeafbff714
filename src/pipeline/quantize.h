#pragma once
// Execute a plan file-to-file: stream every tensor (read -> quantize -> write)
// through a TBB pipeline, then write the index, config.json in the plan's
// dialect, the non-tensor files, the manifest and the report. Everything is
// staged in `<dst>.selq-partial` and renamed to `dst` only when complete, so a
// failure never leaves anything under the final name.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "pipeline/plan.h"
#include "pipeline/rounded_weights.h"
#include "recipe/recipe.h"

namespace selq::pipeline {

struct Progress {
  std::uint64_t bytes_done{0};
  std::uint64_t bytes_total{0};
  std::size_t tensors_done{0};
  std::size_t tensors_total{0};
};

struct QuantizeOptions {
  bool overwrite{false};
  int threads{0};                 // 0: all cores
  bool allow_non_finite{false};   // accept NaN/Inf weights
  // Bounds the anonymous memory of a run whatever the core count: the items
  // in flight (output buffers and source pages) take at most this less what
  // the rest of the run holds; large tensors are quantized in row blocks
  // (pipeline/shard_schedule.h). At least kMinMemoryBudget.
  std::uint64_t memory_budget{std::uint64_t{512} << 20};
  std::function<void(const Progress&)> on_progress;  // called from one thread
  // Called with the plan before any tensor is written (its warnings, say).
  std::function<void(const Plan&)> on_plan;
  // Called with the directory being staged (DST.selq-partial, or the in-place
  // run's final files) once its manifest is there and before the run commits,
  // so that files made from the manifest (selq-report.html: report/, which
  // this module cannot depend on) are part of the one atomic commit.
  std::function<void(const std::string& staged_dir)> before_commit;
  // Under mpirun, file to file: how the ranks share the work ("auto",
  // "shard" or "tensor"; pipeline/distribute.h). In place is by shard.
  std::string split_by{"auto"};
  // Rounding gptq: called with the plan before anything is written, it runs
  // GPTQ layer by layer over the source (calibration/gptq_pass.h; this module
  // cannot run a model) and says where the rounded weights are. The CLI and
  // Python set it; a plan rounding gptq without it is refused.
  std::function<std::shared_ptr<const RoundedWeights>(const io::Checkpoint& source, const Plan& plan)> round_weights;
  // What round_weights returned (set by quantize(); run_quantize reads it).
  std::shared_ptr<const RoundedWeights> rounded;
};

constexpr std::uint64_t kMinMemoryBudget = std::uint64_t{64} << 20;

struct QuantizeResult {
  std::string manifest;  // selq-manifest.json (JSON text)
  double seconds{0};
  std::uint64_t bytes_read{0};
  std::uint64_t bytes_written{0};
  bool already_done{false};  // in place: this recipe was already applied here
  // Under mpirun: how the work was shared ("shard" or "tensor",
  // pipeline/distribute.h); empty for one process.
  std::string split_by;
};

// What `selq quantize` (and selq.quantize in Python) runs, in either mode:
// a source, and a new checkpoint directory or the source itself.
struct QuantizeJob {
  std::string source;       // a directory, a .safetensors file, an index.json or a URL
  std::string destination;  // file to file; empty in place
  bool in_place{false};
  recipe::Recipe recipe;
  PlanOptions plan_options;
  bool must_resume{false};  // refuse when no interrupted run is there to resume (--resume)
};

// A plan already made, file to file: rounding gptq's pass first where the plan
// has it (options.round_weights, which calibration::use_gptq_pass sets; refused
// under mpirun), its fingerprint and provenance into the plan, then
// run_quantize. quantize() ends here; selq.quantize, which holds its plan,
// calls it too.
QuantizeResult quantize_planned(const io::Checkpoint& source, Plan& plan, const recipe::Recipe& recipe,
                                const std::string& dst, const QuantizeOptions& options);

// The one entry for both modes: checks the job, plans the recipe (in place,
// on the original headers even after a crash) and runs it with
// run_quantize or run_quantize_in_place. `plan_out`: the plan that ran.
QuantizeResult quantize(const QuantizeJob& job, const QuantizeOptions& options = {}, Plan* plan_out = nullptr);

// File to file, for a plan already made (selq.plan() in Python, the demo).
// A staging directory left by a killed run with the same plan is resumed:
// its committed shards are kept (checked by hash), the rest redone.
QuantizeResult run_quantize(const io::Checkpoint& source, const Plan& plan,
                            const recipe::Recipe& recipe, const std::string& dst,
                            const QuantizeOptions& options = {});

// In place: each shard of `dir` is rewritten under a temporary name, fsynced
// and renamed over the old one, one at a time, with a journal in
// `dir/.selq-inplace/` (which also keeps sparse header-only copies of the
// original shards, so that planning after a crash sees the original
// checkpoint). Re-running the same command resumes. The index and config.json
// are replaced last. Needs free space for one shard; refuses before writing
// when there is not enough.
QuantizeResult run_quantize_in_place(const std::string& dir, const recipe::Recipe& recipe,
                                     const PlanOptions& plan_options, const QuantizeOptions& options = {},
                                     Plan* plan_out = nullptr);

constexpr const char* kInPlaceDir = ".selq-inplace";

// Where a file-to-file run into `dst` stages its output (`dst.selq-partial`).
std::string staging_dir(const std::string& dst);
// What an interrupted run left to resume: its staging journal (file to file
// into `dst`) or `dir/.selq-inplace` (in place, `dst` unused); "" when nothing.
std::string interrupted_run(const std::string& dir, const std::string& dst, bool in_place);

}  // namespace selq::pipeline
