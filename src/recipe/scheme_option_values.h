#pragma once
// Recipe spellings of scheme option values: read by parse.cpp, written by
// scheme_text.cpp, so a written recipe parses back to the same spec.
#include <utility>

#include "core/codecs.h"
#include "core/tensor.h"

namespace selq::recipe::detail {

inline constexpr std::pair<const char*, ScaleRule> kScaleRuleValues[] = {
    {"floor", ScaleRule::Floor}, {"ceil", ScaleRule::Ceil}, {"even", ScaleRule::Even}, {"rceil", ScaleRule::RCeil}};

inline constexpr std::pair<const char*, DType> kScaleDtypeValues[] = {
    {"f32", DType::F32}, {"bf16", DType::BF16}, {"f16", DType::F16}};

}  // namespace selq::recipe::detail
