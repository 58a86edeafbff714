#pragma once
// A scheme quantizes one weight tensor and describes how its activations are
// quantized at run time. It knows nothing of config dialects: a dialect only
// chooses the options below (scale dtype and shape convention, NVFP4
// convention) and maps the output roles to tensor names.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/codecs.h"
#include "core/tensor.h"

namespace selq::quant {

enum class SchemeKind {
  MXFP4,        // E2M1 elements, E8M0 scale per 32 input channels
  MXFP8,        // E4M3 elements, E8M0 scale per 32
  NVFP4,        // E2M1, E4M3 scale per 16, F32 per-tensor global scale
  FP8Tensor,    // E4M3FN, one F32 scale
  FP8Channel,   // E4M3FN, one scale per output channel
  FP8Block,     // E4M3FN, one F32 scale per 128x128 block (weight_scale_inv semantics)
  IntChannel,   // int4/int8, per output channel
  IntGroup,     // int4/int8, per group of `group_size` input channels
  FP8ChannelE8M0,  // E4M3FN, one E8M0 (power-of-two) scale per output channel
  Count,           // not a kind: the number of kinds, which every kind-indexed table is checked against
};
// Rows of quant/scheme_traits.cpp, one per kind: everything a kind is.
inline constexpr std::size_t kSchemeKindCount = static_cast<std::size_t>(SchemeKind::Count);

// How the activations entering the layer are quantized at run time.
enum class ActMode {
  None,                 // weight-only (activations stay BF16)
  FP8PerToken,          // dynamic, s_t = amax(|x_t|)/448
  FP8PerTokenGroup128,  // dynamic, per token per 128 channels (DeepSeek block FP8)
  FP8StaticTensor,      // static per-tensor input_scale (needs calibration)
  FP8DynamicTensor,     // dynamic per-tensor
  MXFP4Dynamic,         // dynamic MXFP4 (E8M0 scale per 32)
  MXFP8Dynamic,         // dynamic MXFP8
  NVFP4,                // NVFP4 with a static global scale (input_global_scale)
};
// Rows of quant/act_modes.cpp, one per mode: everything a mode is.
inline constexpr std::size_t kActModeCount = 8;

// How a block's free parameters (its scale, its clip) are chosen; the stored
// format and its decoding are the same whatever the rounding
// (quant/rounding_mse.h, docs/RECIPES.md "Rounding").
enum class Rounding : std::uint8_t {
  Nearest,  // the format's scale rule, round to nearest: the bytes compressed-tensors/Quark/ModelOpt write
  Mse,      // per block/group: the candidate scale (nearest's among them) with the least squared error
  Weighted, // Mse with each input channel's error weighted by its mean squared activation (selq calibrate)
  // GPTQ (calibration/gptq.h): the scales come from `mse` over the original weight
  // and stay; the source given to quantize_weight is GPTQ's error-compensated
  // weight, already on their grid, and the kernels encode it with the scales
  // that `outs` holds on entry (gptq_keeps_scales). MX, NVFP4 and INT kinds.
  Gptq,
};
// Its row (name, input, scale choice, kinds): quant/rounding_traits.h.

// A SchemeSpec's rounding. It compares equal to any other: SchemeSpec's ==
// compares stored formats (dialect config groups, engine replays, fused-group
// checks, verify), and a rounding does not change how a tensor is stored or
// read. What differs by rounding says so itself (the manifest's `rounding`,
// the recipe text the run's fingerprint hashes).
struct RoundingChoice {
  Rounding value{Rounding::Nearest};
  bool operator==(const RoundingChoice&) const { return true; }
};

enum class NvfpConvention {
  CompressedTensors,  // weight_global_scale = 448*6/amax, divided out
  ModelOpt,           // weight_scale_2 = amax/(6*448), multiplied in
};

struct SchemeSpec {
  SchemeKind kind{SchemeKind::FP8Channel};
  ActMode act{ActMode::None};
  ScaleRule scale_rule{ScaleRule::Even};  // kinds with E8M0 scales (option scale_rule)
  int bits{8};                            // int schemes: 4 or 8
  bool symmetric{true};                   // int schemes
  int group_size{0};                      // IntGroup (e.g. 128); fixed 32/16 for MX/NVFP4
  int block_rows{128}, block_cols{128};   // FP8Block
  DType scale_dtype{DType::F32};          // FP8Channel/FP8Tensor/Int*: F32, BF16 or F16
  bool scale_keepdim{true};               // one scale per row (option scale_keepdim): (out,1) if true, [out] if false
  NvfpConvention nvfp{NvfpConvention::CompressedTensors};
  // For IntGroup/IntChannel: pack into int32 words (compressed-tensors
  // pack-quantized) instead of one I8 per element.
  bool int_pack_int32{false};
  // How scales are chosen (not part of the format: see RoundingChoice).
  RoundingChoice rounding{};

  // Canonical short name: "mxfp4", "fp8-channel", "nvfp4", "int4-g128-asym", ...
  std::string name() const;
  bool operator==(const SchemeSpec&) const = default;
};

// What each output tensor is, independent of how a dialect names it.
enum class OutRole {
  Weight,       // packed/quantized elements
  Scale,        // per-block/channel/tensor scale
  GlobalScale,  // NVFP4 per-tensor scale (convention-dependent value)
  ZeroPoint,    // asymmetric int
  WeightShape,  // I64 [2] original shape (compressed-tensors pack-quantized)
  InputScale,   // static activation scale from calibration (FP8 input_scale,
                // NVFP4 input global scale in the scheme's convention)
};

struct OutTensorSpec {
  OutRole role;
  DType dtype;
  Shape shape;
};

// Output tensors a scheme produces for a source tensor of `shape` (2-D
// [out,in] or 3-D [experts,out,in]). Throws Unsupported with a clear message
// when the shape cannot be quantized (e.g. in % 32 != 0 for MXFP4).
std::vector<OutTensorSpec> scheme_outputs(const SchemeSpec& spec, const Shape& shape);

// The unquantized weight shape whose scheme_outputs weight has the stored
// weight's dtype and shape (packing hides the in-features: two FP4 per byte,
// eight int4 or four int8 per int32 word), or nullopt when none has.
std::optional<Shape> unquantized_weight_shape(const SchemeSpec& spec, DType stored_dtype, const Shape& stored_shape);

// Every scheme selq can write, before a dialect adapts it (kinds x options x
// activation modes, ~300): the candidates a config read back is matched against.
std::vector<SchemeSpec> writable_schemes();

// Relative Frobenius error a scheme is expected to stay under on trained-like
// weights; a larger error means the tensor does not come from that source or
// was decoded wrongly.
double error_budget(const SchemeSpec& spec);

// The tensor a static activation mode stores next to the weight (FP8 static:
// `input_scale` = amax/448 in the scheme's scale dtype, [1]; NVFP4 activations:
// the input global scale, 448*6/amax as F32 [1] in the compressed-tensors
// convention or amax/(6*448) as an F32 scalar in ModelOpt's), or nullopt when
// activations are dynamic or not quantized. 3-D (expert) weights with static
// activations are rejected: a per-expert calibration is not available.
std::optional<OutTensorSpec> activation_scale_output(const SchemeSpec& spec, const Shape& weight_shape);

// Encodes that tensor from the calibrated max |input activation| of the layer.
// Throws BadInput when `input_amax` is not positive and finite.
void encode_activation_scale(const SchemeSpec& spec, float input_amax, std::span<std::uint8_t> out);
// The static scale qdq_activation_row takes for a calibrated input amax (FP8:
// amax/448; NVFP4: 448*6/amax, compressed-tensors' convention), and the same
// from the value encode_activation_scale stored, whichever convention stored it.
float static_scale_for_amax(ActMode mode, float input_amax);
float static_scale_from_stored(const SchemeSpec& spec, float stored);

// Per-tensor error metrics, accumulated while quantizing (no second pass).
struct ErrorMetrics {
  double sum_sq_ref{0};    // sum x^2
  double sum_sq_err{0};    // sum (x - dq)^2
  double sum_dot{0};       // sum x*dq
  double sum_sq_dq{0};     // sum dq^2
  double max_abs_err{0};
  std::uint64_t elements{0};
  std::uint64_t clipped_elements{0};  // elements whose magnitude exceeded the representable max
  std::uint64_t blocks{0};
  std::uint64_t clipped_blocks{0};    // blocks with at least one clipped element

  void merge(const ErrorMetrics& o);
  double rel_frobenius() const;  // ||x-dq|| / ||x||
  double snr_db() const;         // 10 log10(sum x^2 / sum err^2)
  double cosine() const;
};

// How one tensor is quantized (a whole run's options: pipeline::QuantizeOptions).
struct TensorQuantizeOptions {
  // NVFP4 and FP8 per-tensor: amax to use for the per-tensor scale instead of
  // this tensor's own (fused q/k/v, gate/up, w1/w3 share one NVFP4 global
  // scale; a block of a tensor quantized in row blocks, quant/row_blocks.h).
  std::optional<float> global_amax;
  // Reject NaN/Inf weights (error naming tensor and index) unless false.
  bool reject_non_finite{true};
  // When set, the metrics are appended here as pieces instead (the result is
  // left empty): merged in order over a tensor's blocks (merge_pieces) they
  // are the whole tensor's metrics, bit for bit.
  std::vector<ErrorMetrics>* pieces{nullptr};
  // Flat index of the source's first element in its whole tensor (a block's
  // offset), so that a non-finite weight is reported where it is.
  std::uint64_t first_element{0};
  // Rounding::Weighted: each input channel's error weight (its mean squared
  // activation from `selq calibrate`), `in` values for a 2-D weight, or
  // experts × in for a 3-D stack (expert e's from e·in). Required by
  // Weighted, ignored by the other roundings.
  std::span<const float> channel_weights;
  // NVFP4: power-of-two scales (global and per block: each block's scale is
  // 2^ceil(log2(amax/6))), which keep every value of a weight that comes from
  // MXFP4 exactly (an E2M1 value times a power of two that stays <= 6 is on the
  // grid), as long as its block exponents span at most 18 binades (E4M3's
  // powers of two); blocks below that range take its smallest.
  bool nvfp4_pow2_scales{false};
};

// Quantizes `src` (F32/BF16/F16, shape per scheme_outputs) into `outs`, which
// must have one buffer per OutTensorSpec, each exactly its byte size. Fills
// `metrics`. Deterministic and independent of threading.
void quantize_weight(const SchemeSpec& spec, const TensorView& src,
                     std::span<std::span<std::uint8_t>> outs, ErrorMetrics& metrics,
                     const TensorQuantizeOptions& options = {});

// The metrics quantize_weight(specs[i], src, ..., options[i]) reports, for
// every i, from one read of `src` and without storing any output: the same
// row kernels, their codes not stored (quant/measure.cpp; tested equal for
// every writable scheme). options[i].pieces must be null. Throws as
// quantize_weight does (Unsupported shape, non-finite weights).
void measure_weight(std::span<const SchemeSpec> specs, const TensorView& src,
                    std::span<const TensorQuantizeOptions> options,
                    std::span<ErrorMetrics> metrics);

// Reconstructs F32 weights from the scheme's output tensors.
std::vector<float> dequantize_weight(const SchemeSpec& spec, const Shape& shape,
                                     std::span<const std::span<const std::uint8_t>> outs);
// The same into `dst` (numel(shape) floats), for callers that reuse a buffer.
void dequantize_weight_into(const SchemeSpec& spec, const Shape& shape,
                            std::span<const std::span<const std::uint8_t>> outs, float* dst);

// amax(|w|) over a float tensor (used for NVFP4 fused global scales).
float tensor_amax(const TensorView& src);

// ---- activation quantizers (reference runtime) ----
// Quantize-dequantize one row of activations of length n in place, as the
// engine would at run time for `mode`. `static_scale` is the calibrated
// scale where the mode needs one (FP8 static input_scale; NVFP4 input global
// scale in compressed-tensors convention, i.e. 448*6/amax).
void qdq_activation_row(ActMode mode, float* x, std::size_t n, float static_scale = 0.0f,
                        ScaleRule mx_rule = ScaleRule::Even);

}  // namespace selq::quant
