#pragma once
// Rounding `gptq` for a plan (pipeline::QuantizeOptions::round_weights): the
// source model runs layer by layer over the calibration text; for each decoder
// layer the inputs of its gptq linears are recorded in one run through it with
// the layers before it already rounded, the linears are rounded in batches
// whose Hessians H = Σ x xᵀ (fused modules read the same input and share one)
// fit the memory budget, each from its own inputs' rows
// (calibration/gptq_layer.h), and the calibration sequences go on through the
// rounded layer. Memory: the model's weights as the runtime holds them (a BF16
// source read in place), one batch's Hessians and rounded weights; every
// sequence's states (tokens × hidden floats), the layer's recorded inputs and
// the rounded weights are files of `work_dir` read through the page cache,
// which the kernel spills to disk beyond RAM (calibration/gptq_states.h).
//
// Resumable per batch: `work_dir` gets layer-NNNN-bKKKK.safetensors (a batch's
// rounded weights, BF16 when exact else F32, named as the source tensors,
// written atomically) and the sequences' states after each finished layer
// (committed by an atomic hidden.json), both stamped with the run's
// fingerprint; a rerun with the same fingerprint continues after the last
// finished layer, reusing that layer's finished batches, and its result is
// byte-identical to an uninterrupted run's.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "pipeline/rounded_weights.h"

namespace selq::calibration {

// A linear with no input rows (a routed expert no calibration token reached)
// has no Hessian: it is rounded by `mse`, listed in the manifest's gptq_calibration.
inline constexpr const char* kUnreachedExpertGptqRule =
    "a routed expert's linear that no calibration token reached is rounded by mse (no Hessian to use)";

// A routed expert that few calibration tokens reach has a Hessian of low rank
// (fewer rows than inputs), which GPTQ fits exactly and nothing else: its
// gate/up input's Hessian is completed to expert_prior × in tokens with
// pseudo-tokens of the layer's mean over every routed row (all routed experts
// read the same MoE input), so an unreached expert's gate/up are rounded by
// GPTQ on that mean instead of mse. down_proj reads the expert's own
// activations: no prior.
inline constexpr const char* kRareExpertGptqRule =
    "a routed expert's gate/up input with fewer calibration tokens than expert_prior x its inputs gets the difference "
    "as pseudo-tokens of the layer's mean x x^T over every routed token (the MoE input all routed experts read)";

inline constexpr const char* kGptqGateRule =
    "every eighth calibration sequence held out of the fit; each linear keeps GPTQ's weights or the nearest "
    "rounding on the same scales, whichever has less output error on the held-out rows (a tie keeps GPTQ)";

struct GptqPassOptions {
  // The calibration text's files, directories or text source names (none: the
  // default mix; runtime/text/calibration_text.h), read when the pass runs.
  std::vector<std::string> texts;
  std::int64_t max_tokens{4096};  // 0: all
  std::int64_t context{512};      // tokens per sequence
  std::string work_dir;      // per-layer results (created; kept for a rerun)
  double dampening{0.01};
  // kRareExpertGptqRule's factor (0: off; docs/RECIPES.md, "GPTQ on a large MoE").
  double expert_prior{0.25};
  // The rounding gate (calibration/gptq_gate.h): every eighth sequence held out of the
  // fit, each linear keeps GPTQ's or the nearest rounding on its scales, whichever
  // has less output error on those rows. Off: GPTQ everywhere, fitted on every sequence.
  bool gate{true};
  int threads{0};            // 0: all cores (the bytes do not depend on it)
  // Bytes a batch's Hessians (in x in doubles per input) and rounded weights
  // may take (0: half of the machine's memory). Beyond it a layer's linears
  // are rounded in batches, each batch's Hessians summed from its own inputs'
  // recorded rows (the output does not depend on it).
  std::uint64_t hessian_budget{0};
  // One line per finished layer ("layer 3/30: 7 linears rounded in 2.1 s ...", with
  // where the time went), and one per batch when a layer has several.
  std::function<void(const std::string&)> on_progress;
};

// The GPTQ-rounded weights of every tensor of `plan` that rounds gptq, from
// the model at `source` (a local checkpoint directory of an architecture the
// runtime runs layer by layer). Throws Unsupported naming the model_type when
// the runtime cannot run it layer by layer.
std::shared_ptr<const pipeline::RoundedWeights> run_gptq_pass(const io::Checkpoint& source, const pipeline::Plan& plan,
                                                              const GptqPassOptions& options);

// The directory a file-to-file run into `dst` keeps its GPTQ layers in.
std::string gptq_work_dir(const std::string& dst);

// Sets options.round_weights to run_gptq_pass with `pass` (its work_dir
// gptq_work_dir(dst) unless set): what `selq quantize` and selq.quantize do.
// Remove the work directory (remove_gptq_work_dir) once the run is done.
void use_gptq_pass(pipeline::QuantizeOptions& options, GptqPassOptions pass, const std::string& dst);
void remove_gptq_work_dir(const std::string& dst);

}  // namespace selq::calibration
