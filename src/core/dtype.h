#pragma once
// Element types of the safetensors spec (docs/FORMAT_RULES.md §1.3), in the spec's enum
// order, with their bit widths and header strings.
#include <cstdint>
#include <optional>
#include <string_view>

namespace selq {

enum class DType : std::uint8_t {
  BOOL, F4, F6_E2M3, F6_E3M2, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, F8_E4M3FNUZ, F8_E5M2FNUZ,
  I16, U16, F16, BF16, I32, U32, F32, C64, F64, I64, U64,
};

// Bits per element (4 for F4, 6 for F6_*).
int dtype_bits(DType t);
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// True for F16, BF16, F32, F64: types selq can read as a source of real values.
bool dtype_is_float_source(DType t);

}  // namespace selq
