#pragma once
// The dialect names, the one list: what a recipe's `dialect:` accepts and, in
// the order of exporter::Dialect, what exporter::dialect_name returns
// (export/dialect.h checks the enum against it). Here because recipe is the
// lowest module that names a dialect and export builds on it.
#include <array>

namespace selq::recipe {

inline constexpr std::array<const char*, 3> kDialectNames = {"compressed-tensors", "quark", "modelopt"};

}  // namespace selq::recipe
