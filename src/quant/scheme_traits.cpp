// The table of scheme kinds (scheme_traits.h): one row per SchemeKind, in
// enum order (checked at compile time below).
#include "quant/scheme_traits.h"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

#include "core/enum_table.h"
#include "quant/act_modes.h"
#include "quant/detail.h"
#include "quant/row_kernel.h"

namespace selq::quant {

// Each kind's kernels, defined in its kernel file and taken only by its row
// below.
namespace detail {
void quantize_mx(const MatrixJob&, ErrorMetrics&);
void dequantize_mx(const SchemeSpec&, const Geometry&, std::span<const std::span<const std::uint8_t>>, float*);
void mx_row_kernel(const RowParams&, const RowInput&, const RowOutput&, ErrorMetrics&);

void quantize_nvfp4(const MatrixJob&, ErrorMetrics&);
void dequantize_nvfp4(const SchemeSpec&, const Geometry&, std::span<const std::span<const std::uint8_t>>, float*);
void nvfp4_prepare_rows(RowParams&, const TensorView&, const TensorQuantizeOptions&, std::int64_t, std::uint64_t,
                        std::uint64_t);
void nvfp4_row_kernel(const RowParams&, const RowInput&, const RowOutput&, ErrorMetrics&);

void quantize_fp8(const MatrixJob&, ErrorMetrics&);
void dequantize_fp8(const SchemeSpec&, const Geometry&, std::span<const std::span<const std::uint8_t>>, float*);
void fp8_prepare_rows(RowParams&, const TensorView&, const TensorQuantizeOptions&, std::int64_t, std::uint64_t,
                      std::uint64_t);
void fp8_channel_row_kernel(const RowParams&, const RowInput&, const RowOutput&, ErrorMetrics&);

void quantize_int(const MatrixJob&, ErrorMetrics&);
void dequantize_int(const SchemeSpec&, const Geometry&, std::span<const std::span<const std::uint8_t>>, float*);
void int_prepare_rows(RowParams&, const TensorView&, const TensorQuantizeOptions&, std::int64_t, std::uint64_t,
                      std::uint64_t);
void int_row_kernel(const RowParams&, const RowInput&, const RowOutput&, ErrorMetrics&);

void quantize_fp8_e8m0(const MatrixJob&, ErrorMetrics&);
void dequantize_fp8_e8m0(const SchemeSpec&, const Geometry&, std::span<const std::span<const std::uint8_t>>, float*);
void fp8_e8m0_row_kernel(const RowParams&, const RowInput&, const RowOutput&, ErrorMetrics&);
}  // namespace detail

namespace {

using detail::ceil_div;
using detail::Geometry;
using V = std::vector<OutTensorSpec>;
using V0 = std::vector<SchemeSpec>;

const char* rule_suffix(ScaleRule r) {
  switch (r) {
    case ScaleRule::Floor: return "-floor";
    case ScaleRule::Ceil: return "-ceil";
    case ScaleRule::RCeil: return "-rceil";
    case ScaleRule::Even: return "";
  }
  return "";
}

constexpr unsigned kAllActsButNvfp4 = ~act_bit(ActMode::NVFP4);
constexpr unsigned kNvfp4Acts = act_bit(ActMode::None) | act_bit(ActMode::NVFP4);

int whole_row(const SchemeSpec&, std::int64_t in) { return static_cast<int>(in); }

double budget_fp8(const SchemeSpec&) { return 0.06; }

// (out, 1) or [out]: one scale per output channel.
Shape per_row(const SchemeSpec& s, const Geometry& g) { return s.scale_keepdim ? Shape{g.out, 1} : Shape{g.out}; }

void outputs_int(const SchemeSpec& s, const Geometry& g, V& v) {
  const bool channel = s.kind == SchemeKind::IntChannel;
  const std::int64_t out = g.out, in = g.in;
  const std::int64_t groups = channel ? 1 : in / s.group_size;
  const Shape sshape = (channel && !s.scale_keepdim) ? Shape{out} : Shape{out, groups};
  if (s.int_pack_int32)
    v.push_back({OutRole::Weight, DType::I32, {out, ceil_div(in * s.bits, 32)}});
  else
    v.push_back({OutRole::Weight, DType::I8, {out, in}});
  v.push_back({OutRole::Scale, s.scale_dtype, sshape});
  if (!s.symmetric) {
    if (s.int_pack_int32)  // packed along the output dim (pack_to_int32 packed_dim=0)
      v.push_back({OutRole::ZeroPoint, DType::I32, {ceil_div(out * s.bits, 32), groups}});
    else
      v.push_back({OutRole::ZeroPoint, DType::I8, sshape});
  }
  if (s.int_pack_int32) v.push_back({OutRole::WeightShape, DType::I64, Shape{g.three_d ? 3 : 2}});
}

double budget_int(const SchemeSpec& s) { return s.bits == 4 ? 0.25 : 0.02; }

std::string int_bits_problem(const SchemeSpec& s) {
  if (s.bits != 4 && s.bits != 8) return fmt::format("int schemes support 4 or 8 bits, not {}", s.bits);
  return {};
}

std::string int_group_problem(const SchemeSpec& s) {
  if (auto why = int_bits_problem(s); !why.empty()) return why;
  if (s.group_size <= 0) return fmt::format("{}: group_size must be positive", s.name());
  return {};
}

std::string fp8_block_problem(const SchemeSpec& s) {
  if (s.block_rows <= 0 || s.block_cols <= 0) return "fp8 block scheme needs positive block_rows/block_cols";
  return {};
}

constexpr unsigned kIntOptions = kOptScaleDtype | kOptScaleKeepdim | kOptGroupSize | kOptSymmetric | kOptPackInt32;

constexpr const char* kMxInMultipleWhy =
    "OCP MX blocks are 32 input channels; compressed-tensors mxfp4/mxfp8 and Quark "
    "OCP_MX both require in_features % 32 == 0 (they do not pad)";

constexpr ScaleRule kScaleRules[] = {ScaleRule::Even, ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil};

template <SchemeKind K>
void variants_by_scale_rule(V0& out) {
  for (ScaleRule rule : kScaleRules) out.push_back({.kind = K, .scale_rule = rule});
}

template <SchemeKind K>
void default_variant(V0& out) {
  out.push_back({.kind = K});
}

void int_channel_variants(V0& out) {
  for (int bits : {4, 8})
    for (bool sym : {true, false}) out.push_back({.kind = SchemeKind::IntChannel, .bits = bits, .symmetric = sym});
}

void int_group_variants(V0& out) {
  for (int bits : {4, 8})
    for (bool sym : {true, false})
      for (int g : {32, 64, 128, 256})
        out.push_back({.kind = SchemeKind::IntGroup, .bits = bits, .symmetric = sym, .group_size = g});
}

// F32-scale dialects (Quark, ModelOpt): FP8 scales as F32 ([out] per
// channel), NVFP4 in ModelOpt's convention.
SchemeSpec f32_fp8_tensor(SchemeSpec s) {
  s.scale_dtype = DType::F32;
  return s;
}
SchemeSpec f32_fp8_channel(SchemeSpec s) {
  s.scale_dtype = DType::F32;
  s.scale_keepdim = false;
  return s;
}
SchemeSpec modelopt_nvfp4(SchemeSpec s) {
  s.nvfp = NvfpConvention::ModelOpt;
  return s;
}

// A field a row leaves out takes its default in scheme_traits.h (none, false).
constexpr std::array<SchemeTraits, kSchemeKindCount> kTraits = {{
    {.kind = SchemeKind::MXFP4,
     .recipe_names = {{"mxfp4", 8}, {}},
     .options = kOptScaleRule,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec& s) { return std::string("mxfp4") + rule_suffix(s.scale_rule); },
     .group_width = [](const SchemeSpec&, std::int64_t) { return 32; },
     .in_multiple_why = kMxInMultipleWhy,
     .outputs =
         [](const SchemeSpec&, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::U8, {g.out, g.in / 2}});
           v.push_back({OutRole::Scale, DType::U8, {g.out, g.in / 32}});
         },
     .quantize = detail::quantize_mx,
     .dequantize = detail::dequantize_mx,
     .chunk_rows = detail::kMxChunkRows,
     .row_kernel = detail::mx_row_kernel,
     .gptq_keeps_scales = true,
     .writable_variants = variants_by_scale_rule<SchemeKind::MXFP4>,
     .error_budget = [](const SchemeSpec&) { return 0.25; }},
    {.kind = SchemeKind::MXFP8,
     .recipe_names = {{"mxfp8", 8}, {}},
     .options = kOptScaleRule,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec& s) { return std::string("mxfp8") + rule_suffix(s.scale_rule); },
     .group_width = [](const SchemeSpec&, std::int64_t) { return 32; },
     .in_multiple_why = kMxInMultipleWhy,
     .outputs =
         [](const SchemeSpec&, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
           v.push_back({OutRole::Scale, DType::U8, {g.out, g.in / 32}});
         },
     .quantize = detail::quantize_mx,
     .dequantize = detail::dequantize_mx,
     .chunk_rows = detail::kMxChunkRows,
     .row_kernel = detail::mx_row_kernel,
     .gptq_keeps_scales = true,
     .writable_variants = variants_by_scale_rule<SchemeKind::MXFP8>,
     .error_budget = budget_fp8},
    {.kind = SchemeKind::NVFP4,
     .recipe_names = {{"nvfp4", 8}, {}},
     .options = 0,
     .acts = kNvfp4Acts,
     .label =
         [](const SchemeSpec& s) {
           return std::string(s.nvfp == NvfpConvention::ModelOpt ? "nvfp4-modelopt" : "nvfp4");
         },
     .group_width = [](const SchemeSpec&, std::int64_t) { return 16; },
     .in_multiple_why = "NVFP4 blocks are 16 input channels; compressed-tensors nvfp4-pack-quantized "
                        "requires in_features % 16 == 0 (ModelOpt pads, but vLLM/TRT-LLM kernels expect "
                        "unpadded multiples of 16)",
     .whole_tensor_amax = true,
     .fused_group_amax = true,
     .outputs =
         [](const SchemeSpec& s, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::U8, {g.out, g.in / 2}});
           v.push_back({OutRole::Scale, DType::F8_E4M3, {g.out, g.in / 16}});
           v.push_back({OutRole::GlobalScale, DType::F32, s.nvfp == NvfpConvention::ModelOpt ? Shape{} : Shape{1}});
         },
     .quantize = detail::quantize_nvfp4,
     .dequantize = detail::dequantize_nvfp4,
     .chunk_rows = detail::kNvfp4ChunkRows,
     .prepare_rows = detail::nvfp4_prepare_rows,
     .row_kernel = detail::nvfp4_row_kernel,
     .gptq_keeps_scales = true,
     .f32_scale_form = modelopt_nvfp4,
     .writable_variants = default_variant<SchemeKind::NVFP4>,
     .error_budget = [](const SchemeSpec&) { return 0.20; }},
    {.kind = SchemeKind::FP8Tensor,
     .recipe_names = {{"fp8-tensor", 8}, {}},
     .options = kOptScaleDtype,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec&) { return std::string("fp8-tensor"); },
     .group_width = whole_row,
     .whole_tensor_amax = true,
     .outputs =
         [](const SchemeSpec& s, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
           v.push_back({OutRole::Scale, s.scale_dtype, s.scale_keepdim ? Shape{1} : Shape{}});
         },
     .quantize = detail::quantize_fp8,
     .dequantize = detail::dequantize_fp8,
     .chunk_rows = detail::kFp8ChunkRows,
     .f32_scale_form = f32_fp8_tensor,
     .writable_variants = default_variant<SchemeKind::FP8Tensor>,
     .error_budget = budget_fp8},
    {.kind = SchemeKind::FP8Channel,
     .recipe_names = {{"fp8-channel", 8}, {}},
     .options = kOptScaleDtype | kOptScaleKeepdim,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec&) { return std::string("fp8-channel"); },
     .group_width = whole_row,
     .outputs =
         [](const SchemeSpec& s, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
           v.push_back({OutRole::Scale, s.scale_dtype, per_row(s, g)});
         },
     .quantize = detail::quantize_fp8,
     .dequantize = detail::dequantize_fp8,
     .chunk_rows = detail::kFp8ChunkRows,
     .prepare_rows = detail::fp8_prepare_rows,
     .row_kernel = detail::fp8_channel_row_kernel,
     .f32_scale_form = f32_fp8_channel,
     .writable_variants = default_variant<SchemeKind::FP8Channel>,
     .error_budget = budget_fp8},
    {.kind = SchemeKind::FP8Block,
     .recipe_names = {{"fp8-block", 8}, {}},
     .options = kOptBlockSize,
     .acts = kAllActsButNvfp4,
     .label =
         [](const SchemeSpec& s) {
           if (s.block_rows == s.block_cols) return fmt::format("fp8-block{}", s.block_rows);
           return fmt::format("fp8-block{}x{}", s.block_rows, s.block_cols);
         },
     .group_width = [](const SchemeSpec& s, std::int64_t) { return s.block_cols; },
     .param_problem = fp8_block_problem,
     .outputs =
         [](const SchemeSpec& s, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
           v.push_back(
               {OutRole::Scale, s.scale_dtype, {ceil_div(g.out, s.block_rows), ceil_div(g.in, s.block_cols)}});
         },
     .quantize = detail::quantize_fp8,
     .dequantize = detail::dequantize_fp8,
     .chunk_rows = detail::kFp8ChunkRows,
     .writable_variants = default_variant<SchemeKind::FP8Block>,
     .error_budget = budget_fp8},
    {.kind = SchemeKind::IntChannel,
     .recipe_names = {{"int4", 4}, {"int8", 8}},
     .options = kIntOptions,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec& s) { return fmt::format("int{}-channel{}", s.bits, s.symmetric ? "" : "-asym"); },
     .group_width = whole_row,
     .param_problem = int_bits_problem,
     .outputs = outputs_int,
     .quantize = detail::quantize_int,
     .dequantize = detail::dequantize_int,
     .chunk_rows = detail::kIntChunkRows,
     .prepare_rows = detail::int_prepare_rows,
     .row_kernel = detail::int_row_kernel,
     .gptq_keeps_scales = true,
     .writable_variants = int_channel_variants,
     .error_budget = budget_int},
    {.kind = SchemeKind::IntGroup,
     .recipe_names = {{}, {}},
     .options = kIntOptions,
     .acts = kAllActsButNvfp4,
     .label =
         [](const SchemeSpec& s) {
           return fmt::format("int{}-g{}{}", s.bits, s.group_size, s.symmetric ? "" : "-asym");
         },
     .group_width = [](const SchemeSpec& s, std::int64_t) { return s.group_size; },
     .param_problem = int_group_problem,
     .in_multiple_why = "compressed-tensors group strategy requires in_features % group_size == 0",
     .outputs = outputs_int,
     .quantize = detail::quantize_int,
     .dequantize = detail::dequantize_int,
     .chunk_rows = detail::kIntChunkRows,
     .prepare_rows = detail::int_prepare_rows,
     .row_kernel = detail::int_row_kernel,
     .gptq_keeps_scales = true,
     .writable_variants = int_group_variants,
     .error_budget = budget_int},
    {.kind = SchemeKind::FP8ChannelE8M0,
     .recipe_names = {{"fp8-channel-e8m0", 8}, {}},
     .options = kOptScaleRule | kOptScaleKeepdim,
     .acts = kAllActsButNvfp4,
     .label = [](const SchemeSpec& s) { return std::string("fp8-channel-e8m0") + rule_suffix(s.scale_rule); },
     .group_width = whole_row,
     .outputs =
         [](const SchemeSpec& s, const Geometry& g, V& v) {
           v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
           v.push_back({OutRole::Scale, DType::U8, per_row(s, g)});
         },
     .quantize = detail::quantize_fp8_e8m0,
     .dequantize = detail::dequantize_fp8_e8m0,
     .chunk_rows = detail::kFp8ChunkRows,
     .row_kernel = detail::fp8_e8m0_row_kernel,
     .writable_variants = variants_by_scale_rule<SchemeKind::FP8ChannelE8M0>,
     .error_budget = budget_fp8},
}};

static_assert(rows_in_enum_order<kSchemeKindCount>(
                  kTraits, [](const SchemeTraits& t) { return t.kind; },
                  [](const SchemeTraits& t) {
                    return t.outputs && t.quantize && t.dequantize && t.writable_variants && t.chunk_rows > 0 &&
                           16 % t.chunk_rows == 0;
                  }),
              "quant/scheme_traits.cpp needs one row per SchemeKind, in enum order");

}  // namespace

const SchemeTraits& scheme_traits(SchemeKind kind) {
  const auto i = static_cast<std::size_t>(kind);
  if (i >= kTraits.size()) throw std::logic_error("scheme_traits: not a SchemeKind");
  return kTraits[i];
}

std::span<const SchemeTraits> all_scheme_traits() { return kTraits; }

std::vector<std::string> recipe_scheme_names() {
  std::vector<std::string> out;
  for (const auto& t : kTraits)
    for (const auto& n : t.recipe_names)
      if (n.name) out.emplace_back(n.name);
  return out;
}

bool spec_from_recipe_name(std::string_view name, SchemeSpec& out) {
  for (const auto& t : kTraits)
    for (const auto& n : t.recipe_names)
      if (n.name && name == n.name) {
        out = SchemeSpec{};
        out.kind = t.kind;
        out.bits = n.bits;
        return true;
      }
  return false;
}

std::string recipe_names_taking(unsigned option) {
  std::string out;
  for (const auto& t : kTraits)
    if (t.options & option)
      for (const auto& n : t.recipe_names)
        if (n.name) out += (out.empty() ? "" : ", ") + std::string(n.name);
  return out;
}

std::string act_mismatch(const SchemeSpec& spec) {
  const SchemeTraits& t = scheme_traits(spec.kind);
  if (t.acts & act_bit(spec.act)) return {};
  const auto names = [](unsigned acts, const char* sep) {
    std::string s;
    for (const ActModeTraits& a : all_act_mode_traits())
      if (acts & act_bit(a.mode)) s += fmt::format("{}'{}'", s.empty() ? "" : sep, a.name);
    return s;
  };
  // A kind that takes only some modes says which; otherwise the mode is one
  // that only some kinds take.
  if (t.acts != kAllActsButNvfp4)
    return fmt::format("{} weights take activations {}", t.label(spec), names(t.acts, " or "));
  std::string kinds;
  for (const auto& o : kTraits)
    if (o.acts & act_bit(spec.act))
      for (const auto& n : o.recipe_names)
        if (n.name) kinds += (kinds.empty() ? "" : ", ") + std::string(n.name);
  return fmt::format("activations '{}' need scheme {}", act_mode_name(spec.act), kinds);
}

}  // namespace selq::quant
