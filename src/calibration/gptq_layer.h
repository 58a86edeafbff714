#pragma once
// One decoder layer of the gptq pass (calibration/gptq_pass.h). Its targets'
// inputs are recorded in one run of the layer (calibration/input_recording.h);
// the targets are then rounded in batches whose Hessians and rounded weights
// fit the memory budget, each batch's Hessians summed from its own inputs'
// rows, each batch written to a file of the work directory as soon as it is
// rounded. A batch file's metadata holds the batch's tensors, the run's
// fingerprint and its records (the gate's choices, each module's calibration
// tokens, the modules no token reached); a rerun with the same fingerprint
// reuses the batches already written, within a layer too. When the layer is
// done its linears read their rounded weights from those files' mappings
// (page cache), so the anonymous memory is one batch's, whatever the layer's size.
// Under mpirun (a shared work directory) each rank records its own share of the
// sequences, reads every rank's recording, and rounds the batches assigned to
// it (largest first); a barrier, then every rank reads every batch's file.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/ranks.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "runtime/model/causal_lm.h"

namespace selq::calibration {

// A linear the plan rounds gptq, in the plan, with the NVFP4 global amax of its fused group.
struct GptqTarget {
  const pipeline::PlannedTensor* tensor;
  std::optional<float> global_amax;
};
using LayerTargets = std::vector<std::pair<runtime::Linear*, const GptqTarget*>>;

// What a layer's rounding left beyond its weights.
struct LayerRecord {
  std::map<std::string, std::string> files;  // source tensor -> the batch file holding its rounded weights
  std::vector<std::string> unreached;        // modules no calibration token reached (rounded by mse)
  nlohmann::json gate = nlohmann::json::object();    // module -> the gate's choice
  nlohmann::json tokens = nlohmann::json::object();  // module -> calibration tokens its input received
  // Where the time went, in seconds (a rerun's reused batches cost none).
  double record_s{0}, hessian_s{0}, solve_s{0}, write_s{0};
  nlohmann::json prior = nlohmann::json::object();  // module -> pseudo-tokens of the layer's mean added
  std::size_t batches{0}, reused{0};
  // Adds a batch file's records (its metadata).
  void absorb(const std::string& file, const std::map<std::string, std::string>& metadata);
  void merge(const LayerRecord& other);
};

struct LayerRounding {
  const io::Checkpoint* source{nullptr};
  std::string work_dir, fingerprint;
  bool gate{true};            // hold every eighth sequence out of the fit (calibration/gptq_gate.h)
  double dampening{0.01};
  std::uint64_t budget{0};    // bytes of a batch's Hessians and rounded weights
  // A routed expert's gate/up input with fewer fit tokens than expert_prior × its
  // inputs gets the difference as pseudo-tokens of the layer's routed-token mean
  // H_all / N_all (calibration/gptq_pass.h, kRareExpertGptqRule); 0: none.
  double expert_prior{0};
  std::function<void(const std::string&)> on_progress;  // a line per batch, when a layer has several
  // The ranks sharing the layer (one: a plain run), and which sequences this rank
  // runs: `hidden` below holds sequences [first_sequence, first_sequence + its
  // size) of total_sequences (0: hidden's size), a contiguous share in rank order.
  dist::Ranks* ranks{nullptr};
  std::size_t first_sequence{0}, total_sequences{0};
};

// Rounds `mine`, the targets of `layer`, from `hidden` (each of this rank's
// sequences' states at the layer's input; every eighth of all held out when
// r.gate and there are enough), and leaves each target linear reading its
// rounded weights. Every rank calls it with the same targets.
LayerRecord round_layer(runtime::CausalLM& model, std::int64_t layer, const LayerTargets& mine,
                        const std::vector<std::span<const float>>& hidden, std::int64_t hidden_size,
                        const LayerRounding& r);

// The record of a layer that a previous run rounded (from its batch files).
LayerRecord finished_layer(const std::string& work_dir, std::int64_t layer);

// Whether every batch file of the layers up to `layer` is of the run `fingerprint`.
bool layer_files_match(const std::string& work_dir, const std::string& fingerprint, std::int64_t layer);

}  // namespace selq::calibration
