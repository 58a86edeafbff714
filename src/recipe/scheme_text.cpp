// A SchemeSpec written as a rule's `scheme:` and `options:` (recipe.h): the
// inverse of parse.cpp's parse_scheme, tested on every writable scheme.
#include <fmt/format.h>

#include "core/error.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"
#include "quant/rounding_traits.h"
#include "recipe/recipe.h"
#include "recipe/scheme_option_values.h"

namespace selq::recipe {

namespace {

template <typename T, std::size_t N>
const char* value_name(const std::pair<const char*, T> (&table)[N], T value) {
  for (const auto& [name, v] : table)
    if (v == value) return name;
  throw Error(ErrorKind::Internal, "scheme_text: an option value without a recipe spelling");
}

// The recipe `scheme:` value a spec starts from: same bits, and the same kind
// or one that group_size turns into it (int4/int8 -> per group).
std::string recipe_name_of(const quant::SchemeSpec& spec, quant::SchemeSpec& base) {
  for (const std::string& name : quant::recipe_scheme_names()) {
    quant::spec_from_recipe_name(name, base);
    const bool grouped = spec.kind == quant::SchemeKind::IntGroup &&
                         (quant::scheme_traits(base.kind).options & quant::kOptGroupSize);
    if (base.bits == spec.bits && (base.kind == spec.kind || grouped)) return name;
  }
  throw Error(ErrorKind::Internal, fmt::format("scheme_text: no recipe scheme writes {}", spec.name()));
}

}  // namespace

SchemeText scheme_text(const quant::SchemeSpec& spec) {
  quant::SchemeSpec base;
  SchemeText out{recipe_name_of(spec, base), ""};
  const unsigned takes = quant::scheme_traits(spec.kind).options;
  std::vector<std::string> opts;  // in parse_scheme's key order
  if (spec.act != base.act) opts.push_back(fmt::format("activations: {}", quant::act_mode_name(spec.act)));
  if ((takes & quant::kOptScaleRule) && spec.scale_rule != base.scale_rule)
    opts.push_back(fmt::format("scale_rule: {}", value_name(detail::kScaleRuleValues, spec.scale_rule)));
  if ((takes & quant::kOptScaleDtype) && spec.scale_dtype != base.scale_dtype)
    opts.push_back(fmt::format("scale_dtype: {}", value_name(detail::kScaleDtypeValues, spec.scale_dtype)));
  if ((takes & quant::kOptScaleKeepdim) && spec.scale_keepdim != base.scale_keepdim)
    opts.push_back(fmt::format("scale_keepdim: {}", spec.scale_keepdim));
  if ((takes & quant::kOptBlockSize) && (spec.block_rows != base.block_rows || spec.block_cols != base.block_cols))
    opts.push_back(spec.block_rows == spec.block_cols
                       ? fmt::format("block_size: {}", spec.block_rows)
                       : fmt::format("block_size: [{}, {}]", spec.block_rows, spec.block_cols));
  if ((takes & quant::kOptGroupSize) && spec.group_size != base.group_size)
    opts.push_back(fmt::format("group_size: {}", spec.group_size));
  if ((takes & quant::kOptSymmetric) && spec.symmetric != base.symmetric)
    opts.push_back(fmt::format("symmetric: {}", spec.symmetric));
  if ((takes & quant::kOptPackInt32) && spec.int_pack_int32 != base.int_pack_int32)
    opts.push_back(fmt::format("pack_int32: {}", spec.int_pack_int32));
  if (spec.rounding.value != quant::Rounding::Nearest)
    opts.push_back(fmt::format("rounding: {}", quant::rounding_name(spec.rounding.value)));
  if (!opts.empty()) out.options = fmt::format("{{{}}}", fmt::join(opts, ", "));
  return out;
}

}  // namespace selq::recipe
