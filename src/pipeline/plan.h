#pragma once
// A plan: for every source tensor, what happens to it (keep, quantize with a
// scheme, pass through), which output tensors it becomes (names, dtypes,
// shapes), and in which output shard they land. Planning reads headers only;
// `quantize` consumes exactly this value, so `plan` is a true dry run.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/dialect.h"
#include "io/checkpoint.h"
#include "pipeline/requantize_source.h"
#include "recipe/recipe.h"

namespace selq::pipeline {

struct PlannedOutput {
  TensorInfo info;
  std::optional<quant::OutRole> role;  // set for outputs of a quantized tensor
};

struct PlannedTensor {
  std::string source;        // source tensor name
  std::string source_shard;  // shard file it is read from
  TensorInfo source_info;
  recipe::Action action{recipe::Action::Keep};
  std::optional<quant::SchemeSpec> scheme;  // dialect-adapted
  std::string module;
  std::vector<PlannedOutput> outputs;
  // Tensors quantized with a shared NVFP4 global scale carry the same group
  // key, the fused module (e.g. "model.layers.0.self_attn.qkv_proj"); empty otherwise.
  std::string fused_group;
  // Calibrated max |input| of the module, for schemes with static activation
  // scales (the last output is then the InputScale tensor).
  std::optional<float> input_amax;
  // Rounding::Weighted: the module's input second moments from the
  // calibration (one weight per input channel), shared by the tensors of a module.
  std::shared_ptr<const std::vector<float>> channel_weights;
  // Re-quantized MXFP4 -> NVFP4, whatever the rounding: power-of-two NVFP4
  // scales, which keep every MXFP4 value (TensorQuantizeOptions::nvfp4_pow2_scales).
  bool exact_from_mxfp4{false};
  // Re-quantized pre-quantized module: how its weight is stored in the source
  // (the tensors to read and dequantize; `source` is the stored weight).
  std::optional<StoredWeight> stored;
  std::uint64_t in_bytes() const { return stored ? stored->bytes : source_info.nbytes(); }
  std::uint64_t out_bytes() const;
};

struct PlannedShard {
  std::string name;                  // output file name
  std::vector<std::size_t> tensors;  // indices into Plan::tensors, in write order
};

struct PlanOptions {
  std::optional<exporter::Dialect> dialect;  // overrides the recipe's
  std::uint64_t max_shard_bytes{0};          // 0: keep the source layout
  // Per-module input amax from `selq calibrate` (static activation scales),
  // and the file it came from (for error messages).
  std::map<std::string, float> activation_amax;
  std::string calibration_path;
  // What text that calibration read (load_calibration_provenance), recorded
  // in the manifest; null without a calibration.
  nlohmann::json calibration;
  // A warning refuses the plan (BadInput naming the first), before any write.
  bool strict{false};
  // Build and check the final config (Plan::config). Off only for plans that
  // are never written, such as the planner's byte count (seconds at 70k modules).
  bool build_config{true};
};

struct Plan {
  std::string source;
  std::string recipe_path;
  exporter::Dialect dialect{exporter::Dialect::CompressedTensors};
  std::vector<PlannedTensor> tensors;
  std::vector<PlannedShard> shards;
  std::vector<std::string> warnings;
  std::vector<exporter::ModuleDecision> linear_modules;
  nlohmann::json calibration;  // PlanOptions::calibration
  // The source's rotation record (io/rotation_record.h), null when it has
  // none; in the manifest, so a rotated checkpoint says how it was made.
  nlohmann::json rotation;
  // Rounding gptq: what its rounded weights depend on (RoundedWeights::
  // fingerprint), set before the run; part of the run's fingerprint.
  std::string rounded_fingerprint;
  // ... and what it read (RoundedWeights::provenance), in the manifest.
  nlohmann::json gptq_calibration;
  // Whether any tensor rounds gptq (and so needs RoundedWeights).
  bool needs_model_pass() const;
  // The dialect's quantization_config and side files, built (and checked
  // against every engine) by make_plan, so a plan that cannot be written
  // fails before anything is written; unset for a plan put together by hand.
  std::optional<exporter::ConfigOutput> config;

  std::uint64_t source_bytes() const;
  // Extra disk an in-place run needs: its largest rewritten shard.
  std::uint64_t largest_output_shard_bytes() const;
  std::uint64_t output_bytes() const;
  // Stored bits per weight element over all linear weights (quantized or not).
  double bits_per_weight() const;
  // What bits_per_weight divides: the output bytes of the linear modules'
  // tensors, and the weight elements they hold.
  struct LinearTotals {
    std::uint64_t bytes{0}, elements{0};
  };
  LinearTotals linear_totals() const;
  // The plan as JSON (what `selq plan --json` prints and scripts read), in the
  // bytes of nlohmann's dump(indent) (-1: compact), written to `out` piece by piece.
  void write_json(const std::function<void(std::string_view)>& out, int indent = 2) const;
  std::string json_text(int indent = 2) const;
};


// Every check that can refuse a recipe on this checkpoint runs here (schemes,
// shapes, names, calibration, the final config for every engine): `selq plan`
// and both quantize modes fail before their first write, through this call.
Plan make_plan(const io::Checkpoint& checkpoint, const recipe::Recipe& recipe,
               const PlanOptions& options = {});

// What the dialect writer needs from the source and the plan: the linear
// modules' decisions, the heads engines build without a stored weight, and
// the source's own quantization_config.
exporter::ConfigInput config_input(const io::Checkpoint& source, const Plan& plan);

// Short human summary (per-scheme counts and bytes, size before/after, bpw,
// per-layer map, warnings).
std::string format_plan(const Plan& plan);

}  // namespace selq::pipeline
