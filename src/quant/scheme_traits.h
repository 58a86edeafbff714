#pragma once
// One description per scheme kind: its recipe names and options, the check of
// a source shape, the tensors it stores, its whole-tensor amax needs, the
// activation modes it pairs with, its kernels (one row-kernel signature,
// quant/row_kernel.h) and their row chunks, what GPTQ and the F32-scale
// dialects need of it, the variants selq writes, and its error budget. Recipe
// parsing, plan sizes, row blocks, measure, verify, the dialects and the
// planner ask this table; a new kind is its enum value, one row in
// scheme_traits.cpp, its kernel file, and one row per dialect in export/
// (docs/ARCHITECTURE.md "A scheme in one place").
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "quant/scheme.h"

namespace selq::quant {

namespace detail {
struct Geometry;
struct MatrixJob;
struct RowParams;
struct RowInput;
struct RowOutput;
}  // namespace detail

// The recipe `options:` keys a scheme kind takes (bit set).
enum SchemeOption : unsigned {
  kOptScaleRule = 1u << 0,     // scale_rule: floor|ceil|even|rceil (E8M0 scales)
  kOptScaleDtype = 1u << 1,    // scale_dtype: f32|bf16|f16
  kOptScaleKeepdim = 1u << 2,  // scale_keepdim: (out,1) or [out]
  kOptBlockSize = 1u << 3,     // block_size: N or [rows, cols]
  kOptGroupSize = 1u << 4,     // group_size: N, or -1 for per channel
  kOptSymmetric = 1u << 5,     // symmetric
  kOptPackInt32 = 1u << 6,     // pack_int32
};

// A recipe `scheme:` value and the spec it starts from (before options).
struct RecipeSchemeName {
  const char* name{nullptr};
  int bits{8};  // int schemes: int4 / int8
};

struct SchemeTraits {
  SchemeKind kind;
  RecipeSchemeName recipe_names[2];  // {nullptr}: reached through another kind's options only
  unsigned options;                  // SchemeOption bits
  // ActMode bits (1 << mode) this kind's weights pair with
  // (docs/ENGINE_RULES.md §1.2 step 4, §2.3).
  unsigned acts;
  // The canonical label (SchemeSpec::name(): manifest, journal, verify).
  std::string (*label)(const SchemeSpec&);
  // Scale-group width along `in` (the whole row when the scale is per row).
  int (*group_width)(const SchemeSpec&, std::int64_t in);
  // Why the spec's own parameters (bits, group or block size) cannot be
  // quantized, or empty; nullptr when the kind has none to check.
  std::string (*param_problem)(const SchemeSpec&) = nullptr;
  // Why `in` must be a multiple of group_width (what each dialect expects), or
  // nullptr when any `in` is quantized.
  const char* in_multiple_why = nullptr;
  // A scale over the whole 2-D tensor (its amax is needed before any row
  // block is quantized: quant/row_blocks.h, TensorQuantizeOptions::global_amax).
  bool whole_tensor_amax = false;
  // Fused q/k/v, gate/up, w1/w3 share one amax (the NVFP4 global scale).
  bool fused_group_amax = false;
  // The tensors stored for one weight of geometry g (2-D shapes; the expert
  // dimension is added by scheme_outputs).
  void (*outputs)(const SchemeSpec&, const detail::Geometry& g, std::vector<OutTensorSpec>& v);
  void (*quantize)(const detail::MatrixJob&, ErrorMetrics&);
  void (*dequantize)(const SchemeSpec&, const detail::Geometry&, std::span<const std::span<const std::uint8_t>>,
                     float*);
  // Rows per parallel task of `quantize`: the boundaries of its metric
  // pieces, which measure_weight reproduces (each divides 16).
  std::int64_t chunk_rows;
  // The row kernel `quantize` runs, for measure_weight, and what it sets once
  // per matrix (nullptr: nothing beyond the spec); row_kernel is nullptr when
  // a scale spans rows (measured by quantizing instead).
  void (*prepare_rows)(detail::RowParams&, const TensorView&, const TensorQuantizeOptions&, std::int64_t in,
                       std::uint64_t first, std::uint64_t count) = nullptr;
  void (*row_kernel)(const detail::RowParams&, const detail::RowInput&, const detail::RowOutput&,
                     ErrorMetrics&) = nullptr;
  // Its rows have a per-element grid GPTQ can round onto with the scales
  // kept (calibration/gptq.h, quant/gptq_grid.h).
  bool gptq_keeps_scales = false;
  // How the dialects that store F32 scale tensors (Quark, ModelOpt) write it;
  // nullptr: as the scheme says.
  SchemeSpec (*f32_scale_form)(SchemeSpec) = nullptr;
  // Appends the variants selq writes (act left None); writable_schemes() is
  // every kind's variants under every activation mode.
  void (*writable_variants)(std::vector<SchemeSpec>&);
  // Relative Frobenius error expected on trained-like weights (verify).
  double (*error_budget)(const SchemeSpec&);
};

const SchemeTraits& scheme_traits(SchemeKind kind);
std::span<const SchemeTraits> all_scheme_traits();

inline constexpr unsigned act_bit(ActMode a) { return 1u << static_cast<unsigned>(a); }

// Recipe `scheme:` values in table order ("mxfp4", ..., "int4", "int8").
std::vector<std::string> recipe_scheme_names();
// The spec a recipe `scheme:` value starts from, or false when none has it.
bool spec_from_recipe_name(std::string_view name, SchemeSpec& out);
// The recipe `scheme:` values of the kinds that take `option` ("fp8-tensor, fp8-channel, int4, int8").
std::string recipe_names_taking(unsigned option);
// Empty when `spec.act` pairs with `spec.kind`, else why not (one line).
std::string act_mismatch(const SchemeSpec& spec);

}  // namespace selq::quant
