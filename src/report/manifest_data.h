#pragma once
// What a quantized checkpoint's manifest says, per tensor, in the terms the
// report draws: format, layer and module kind (recipe/names.h),
// shape, bytes before and after, and the measured error.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace selq::report {

struct TensorEntry {
  std::string name;       // source tensor
  std::string module;     // "model.layers.3.self_attn.q_proj"
  std::string format;     // the manifest's: "nvfp4", "fp8-channel", "unquantized", ...
  Shape shape;            // source shape
  std::uint64_t source_bytes{0}, stored_bytes{0};  // stored: every output, scales included
  bool quantized{false};
  std::optional<double> snr_db;  // quantized tensors; +inf when the error is exactly 0
  int layer{-1};          // -1 outside the decoder layers
  std::string kind;       // layer-relative ("self_attn.q_proj", "mlp.experts.*.up_proj"); the module outside layers
  bool linear{false};     // a weight matrix the layer map shows (quantized, or an unquantized 2-D weight)
};

// `--rounding gptq`'s calibration and its gate (the manifest's gptq_calibration):
// which rounding each linear kept and the held-out output errors that chose it.
struct GateEntry {
  std::string module, kept;  // kept: "gptq" or "nearest"
  double gptq_error{0}, nearest_error{0};  // relative to the output's energy
};
struct GptqData {
  std::string text;  // the calibration text, as the manifest describes it
  double tokens{0}, context{0}, held_out_sequences{0}, kept_gptq{0}, kept_nearest{0};
  bool gated{false};  // the run had a gate (not --no-gptq-gate)
  std::vector<GateEntry> modules;  // manifest order
  std::map<std::string, double> module_tokens;  // calibration tokens each linear's input received
  std::vector<std::string> unreached;           // linears no token reached (rounded by mse)
};

struct ManifestData {
  std::string dir, path;  // checkpoint directory and its manifest
  std::string source, dialect, recipe_name, recipe_text;
  std::vector<TensorEntry> tensors;  // manifest order
  std::vector<std::string> formats;  // every format, sorted
  int layers{0};                     // 1 + the largest layer index (0: none)
  std::optional<GptqData> gptq;      // a gptq run's calibration and gate
  // The static-scale calibration's routed experts (the manifest's calibration.expert_tokens):
  // "model.layers.3.mlp.experts.7" -> tokens; empty for dense models and runs without one.
  std::map<std::string, double> calibration_expert_tokens;
  bool planned() const;              // the recipe was written by `selq plan --target-bpw`
  // Quantized formats used (not "unquantized" or "pre-quantized"), sorted.
  std::vector<std::string> quantized_formats() const;
};

// Reads DIR/selq-manifest.json. BadInput (one line naming the file and the
// tensor) when it is missing, malformed, or a quantized tensor has no metrics.
ManifestData load_manifest(const std::string& dir);

// The manifest format of kept tensors.
inline constexpr const char* kUnquantized = "unquantized";

}  // namespace selq::report
