// The table of activation modes (act_modes.h): one row per ActMode, in enum
// order (checked at compile time below).
#include "quant/act_modes.h"

#include <array>
#include <stdexcept>

#include "core/enum_table.h"
#include "quant/detail.h"

namespace selq::quant {

namespace {

using IS = InputScaleKind;

constexpr std::array<ActModeTraits, kActModeCount> kActModes = {{
    {ActMode::None, "none", "weight-only", IS::None, detail::qdq_act_none},
    {ActMode::FP8PerToken, "fp8-per-token", "input fp8 per-token dynamic", IS::None, detail::qdq_act_fp8_dynamic},
    {ActMode::FP8PerTokenGroup128, "fp8-per-token-group128", "input fp8 per-token-group-128 dynamic", IS::None,
     detail::qdq_act_fp8_group128},
    {ActMode::FP8StaticTensor, "fp8-static", "input fp8 per-tensor static", IS::FP8, detail::qdq_act_fp8_static},
    {ActMode::FP8DynamicTensor, "fp8-dynamic-tensor", "input fp8 per-tensor dynamic", IS::None,
     detail::qdq_act_fp8_dynamic},
    {ActMode::MXFP4Dynamic, "mxfp4-dynamic", "input mxfp4 dynamic", IS::None, detail::qdq_act_mxfp4},
    {ActMode::MXFP8Dynamic, "mxfp8-dynamic", "input mxfp8 dynamic", IS::None, detail::qdq_act_mxfp8},
    {ActMode::NVFP4, "nvfp4", "input nvfp4", IS::NVFP4Global, detail::qdq_act_nvfp4},
}};

static_assert(rows_in_enum_order<kActModeCount>(
                  kActModes, [](const ActModeTraits& a) { return a.mode; },
                  [](const ActModeTraits& a) { return a.name != nullptr; }),
              "quant/act_modes.cpp needs one row per ActMode, in enum order");

}  // namespace

const ActModeTraits& act_mode_traits(ActMode mode) {
  const auto i = static_cast<std::size_t>(mode);
  if (i >= kActModes.size()) throw std::logic_error("act_mode_traits: not an ActMode");
  return kActModes[i];
}

std::span<const ActModeTraits> all_act_mode_traits() { return kActModes; }

}  // namespace selq::quant
