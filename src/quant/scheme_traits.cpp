// The table of scheme kinds (scheme_traits.h): one row per SchemeKind, in
// enum order (checked at compile time below).
#include "quant/scheme_traits.h"

#include <fmt/format.h>

#include <array>
#include <stdexcept>

#include "core/enum_table.h"
#include "quant/act_modes.h"
#include "quant/detail.h"

namespace selq::quant {

namespace {

using detail::ceil_div;
using detail::Geometry;
using V = std::vector<OutTensorSpec>;

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

constexpr std::array<SchemeTraits, kSchemeKindCount> kTraits = {{
    {SchemeKind::MXFP4, {{"mxfp4", 8}, {}}, kOptScaleRule, kAllActsButNvfp4,
     [](const SchemeSpec& s) { return std::string("mxfp4") + rule_suffix(s.scale_rule); },
     [](const SchemeSpec&, std::int64_t) { return 32; }, nullptr,
     "OCP MX blocks are 32 input channels; compressed-tensors mxfp4/mxfp8 and Quark "
     "OCP_MX both require in_features % 32 == 0 (they do not pad)",
     false, false,
     [](const SchemeSpec&, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::U8, {g.out, g.in / 2}});
       v.push_back({OutRole::Scale, DType::U8, {g.out, g.in / 32}});
     },
     detail::quantize_mx, detail::dequantize_mx, [](const SchemeSpec&) { return 0.25; }},
    {SchemeKind::MXFP8, {{"mxfp8", 8}, {}}, kOptScaleRule, kAllActsButNvfp4,
     [](const SchemeSpec& s) { return std::string("mxfp8") + rule_suffix(s.scale_rule); },
     [](const SchemeSpec&, std::int64_t) { return 32; }, nullptr,
     "OCP MX blocks are 32 input channels; compressed-tensors mxfp4/mxfp8 and Quark "
     "OCP_MX both require in_features % 32 == 0 (they do not pad)",
     false, false,
     [](const SchemeSpec&, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
       v.push_back({OutRole::Scale, DType::U8, {g.out, g.in / 32}});
     },
     detail::quantize_mx, detail::dequantize_mx, budget_fp8},
    {SchemeKind::NVFP4, {{"nvfp4", 8}, {}}, 0, kNvfp4Acts,
     [](const SchemeSpec& s) { return std::string(s.nvfp == NvfpConvention::ModelOpt ? "nvfp4-modelopt" : "nvfp4"); },
     [](const SchemeSpec&, std::int64_t) { return 16; }, nullptr,
     "NVFP4 blocks are 16 input channels; compressed-tensors nvfp4-pack-quantized "
     "requires in_features % 16 == 0 (ModelOpt pads, but vLLM/TRT-LLM kernels expect "
     "unpadded multiples of 16)",
     true, true,
     [](const SchemeSpec& s, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::U8, {g.out, g.in / 2}});
       v.push_back({OutRole::Scale, DType::F8_E4M3, {g.out, g.in / 16}});
       v.push_back({OutRole::GlobalScale, DType::F32, s.nvfp == NvfpConvention::ModelOpt ? Shape{} : Shape{1}});
     },
     detail::quantize_nvfp4, detail::dequantize_nvfp4, [](const SchemeSpec&) { return 0.20; }},
    {SchemeKind::FP8Tensor, {{"fp8-tensor", 8}, {}}, kOptScaleDtype, kAllActsButNvfp4,
     [](const SchemeSpec&) { return std::string("fp8-tensor"); }, whole_row, nullptr, nullptr, true, false,
     [](const SchemeSpec& s, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
       v.push_back({OutRole::Scale, s.scale_dtype, s.scale_keepdim ? Shape{1} : Shape{}});
     },
     detail::quantize_fp8, detail::dequantize_fp8, budget_fp8},
    {SchemeKind::FP8Channel, {{"fp8-channel", 8}, {}}, kOptScaleDtype | kOptScaleKeepdim, kAllActsButNvfp4,
     [](const SchemeSpec&) { return std::string("fp8-channel"); }, whole_row, nullptr, nullptr, false, false,
     [](const SchemeSpec& s, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
       v.push_back({OutRole::Scale, s.scale_dtype, per_row(s, g)});
     },
     detail::quantize_fp8, detail::dequantize_fp8, budget_fp8},
    {SchemeKind::FP8Block, {{"fp8-block", 8}, {}}, kOptBlockSize, kAllActsButNvfp4,
     [](const SchemeSpec& s) {
       if (s.block_rows == s.block_cols) return fmt::format("fp8-block{}", s.block_rows);
       return fmt::format("fp8-block{}x{}", s.block_rows, s.block_cols);
     },
     [](const SchemeSpec& s, std::int64_t) { return s.block_cols; }, fp8_block_problem, nullptr, false, false,
     [](const SchemeSpec& s, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
       v.push_back({OutRole::Scale, s.scale_dtype, {ceil_div(g.out, s.block_rows), ceil_div(g.in, s.block_cols)}});
     },
     detail::quantize_fp8, detail::dequantize_fp8, budget_fp8},
    {SchemeKind::IntChannel, {{"int4", 4}, {"int8", 8}}, kIntOptions, kAllActsButNvfp4,
     [](const SchemeSpec& s) { return fmt::format("int{}-channel{}", s.bits, s.symmetric ? "" : "-asym"); },
     whole_row, int_bits_problem, nullptr, false, false, outputs_int, detail::quantize_int, detail::dequantize_int,
     budget_int},
    {SchemeKind::IntGroup, {{}, {}}, kIntOptions, kAllActsButNvfp4,
     [](const SchemeSpec& s) { return fmt::format("int{}-g{}{}", s.bits, s.group_size, s.symmetric ? "" : "-asym"); },
     [](const SchemeSpec& s, std::int64_t) { return s.group_size; }, int_group_problem,
     "compressed-tensors group strategy requires in_features % group_size == 0", false, false, outputs_int,
     detail::quantize_int, detail::dequantize_int, budget_int},
    {SchemeKind::FP8ChannelE8M0, {{"fp8-channel-e8m0", 8}, {}}, kOptScaleRule | kOptScaleKeepdim, kAllActsButNvfp4,
     [](const SchemeSpec& s) { return std::string("fp8-channel-e8m0") + rule_suffix(s.scale_rule); }, whole_row,
     nullptr, nullptr, false, false,
     [](const SchemeSpec& s, const Geometry& g, V& v) {
       v.push_back({OutRole::Weight, DType::F8_E4M3, {g.out, g.in}});
       v.push_back({OutRole::Scale, DType::U8, per_row(s, g)});
     },
     detail::quantize_fp8_e8m0, detail::dequantize_fp8_e8m0, budget_fp8},
}};

static_assert(rows_in_enum_order<kSchemeKindCount>(
                  kTraits, [](const SchemeTraits& t) { return t.kind; },
                  [](const SchemeTraits& t) { return t.outputs != nullptr; }),
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
