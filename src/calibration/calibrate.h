#pragma once
// Per-linear activation amax measured with the reference runtime, for static
// activation scales (FP8 static input_scale = amax/448; NVFP4 input global
// scale = 448*6/amax in the compressed-tensors convention), and each linear's
// input second moments (the mean of x² per input channel: the diagonal of
// XᵀX / rows), for rounding `weighted` (quant/rounding_mse.h).
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::runtime {
struct Linear;
}  // namespace selq::runtime

namespace selq::calibration {

struct CalibrationResult {
  std::string model;
  std::string text_source;
  std::int64_t tokens{0};
  std::int64_t context{0};
  std::map<std::string, float> amax;  // linear module -> max |input activation|
  nlohmann::json text_provenance;     // the bytes read and their lines (text_overlap.h)
  // MoE: tokens routed to each expert ("model.layers.3.mlp.experts.7" -> n)
  // and the routed experts' linears no calibration token reached, with the
  // module whose amax they were given (kUnreachedExpertRule).
  std::map<std::string, std::int64_t> expert_tokens;
  std::map<std::string, std::string> unreached;
  // linear module -> mean x² of each input channel over the tokens it saw
  // (an unreached expert: the mean over its layer's reached experts of the
  // same projection, kUnreachedExpertMomentsRule).
  std::map<std::string, std::vector<float>> input_moments;
  // {"format": "selq-calibration-v1", "model", "text", "tokens", "context",
  //  "text_provenance", "activation_amax": {module: amax}; with routed
  //  experts also "expert_tokens", "unreached_experts": {module: source},
  //  "unreached_expert_rule"}
  nlohmann::json to_json() const;
  // Writes the JSON to `json_path` and the second moments beside it, in
  // safetensors (one F32 [in] tensor per module, named by the module): the
  // JSON's "input_moments" names that file (relative to the JSON's
  // directory) with its content hash. Both atomic; the moments first, so a
  // JSON on disk never names a missing or older file.
  void save(const std::string& json_path) const;
};

// The moments file `save` writes beside `json_path`: calib.json -> calib.moments.safetensors.
std::string input_moments_path_for(const std::string& json_path);

// Σ x² per input channel of a linear's inputs and the rows seen: the input
// second moments of calibrate and of the planner's +weighted candidates.
// The same bits however the windows are split among ranks: a window's rows
// are summed in double in the order the model runs them, then each closed
// window's sums, rounded to multiples of 2^-48 (far below a float mean's last
// bit for any channel that carries signal), are added in 128-bit integers,
// whose sums do not depend on their order.
struct SquareSums {
  __extension__ typedef unsigned __int128 Fixed;
  static constexpr int kFractionBits = 48;

  std::vector<double> window;  // the open window's Σ x²
  std::int64_t window_rows{0};
  std::vector<Fixed> sum;      // the closed windows', in units of 2^-48
  std::int64_t rows{0};        // the closed windows'
  void add(const float* x, std::int64_t rows, std::int64_t in);
  // Adds the open window to `sum`; BadInput naming `module` when a sum is
  // not finite or too large for the exact sums (2^78).
  void close_window(const std::string& module);
  // The mean x² per channel over the closed windows; empty when none had a row.
  std::vector<float> means() const;
  // The closed windows' sums for exchange between ranks: kLimbs 32-bit limbs
  // per channel, each in a 64-bit word (so that the words of up to 2^32 ranks
  // add without overflow), zeros past this module's channels.
  static constexpr std::size_t kLimbs = 4;
  void append_limbs(std::vector<std::uint64_t>& out, std::size_t channels) const;
  // A channel's sum from its (summed) limbs.
  static Fixed from_limbs(const std::uint64_t* limbs);
};

// Raises `amax[l.module]` to the max |x| of the `rows` inputs a linear-hook
// call saw (CausalLM::set_activation_hook): calibrate's measure, and the
// planner's for its calibrated candidates.
void record_input_amax(std::map<std::string, float>& amax, const runtime::Linear& l, const float* x,
                       std::int64_t rows);

// What an expert's linear that no calibration token reached gets: the largest
// amax of the same projection over the layer's experts (as Quark does for an
// expert without calibration data), never zero; the file lists each such module.
inline constexpr const char* kUnreachedExpertRule =
    "an expert no calibration token reached gets, per projection, the largest amax of that projection over the "
    "same layer's reached experts";
inline constexpr const char* kUnreachedExpertMomentsRule =
    "an expert no calibration token reached gets, per projection, the mean input second moments of that "
    "projection over the same layer's reached experts";

// Runs the text through the model in windows of `context` tokens (at most
// `max_tokens`, 0: all) and records each linear's input amax. Fused inputs
// (q/k/v, gate/up) read the same activations, so they get the same value.
// Under mpirun the ranks share the windows (a contiguous share each) and rank 0
// returns the whole result: the amax, token counts and unreached experts of
// one process, and input moments equal to one process's but for the last bit
// (their sums are added rank by rank); the other ranks return their own share,
// which is not to be saved.
CalibrationResult calibrate(const std::string& checkpoint, const std::string& text, const std::string& text_source,
                            std::int64_t max_tokens, std::int64_t context,
                            const std::function<void(std::uint64_t, std::uint64_t)>& on_progress = {});

}  // namespace selq::calibration
