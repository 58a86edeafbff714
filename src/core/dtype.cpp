#include "core/dtype.h"

#include <array>

namespace selq {
namespace {
struct DTypeInfo {
  DType type;
  std::string_view name;
  int bits;
};
constexpr std::array<DTypeInfo, 22> kInfo{{
    {DType::BOOL, "BOOL", 8},       {DType::F4, "F4", 4},
    {DType::F6_E2M3, "F6_E2M3", 6}, {DType::F6_E3M2, "F6_E3M2", 6},
    {DType::U8, "U8", 8},           {DType::I8, "I8", 8},
    {DType::F8_E5M2, "F8_E5M2", 8}, {DType::F8_E4M3, "F8_E4M3", 8},
    {DType::F8_E8M0, "F8_E8M0", 8}, {DType::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {DType::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8},
    {DType::I16, "I16", 16},        {DType::U16, "U16", 16},
    {DType::F16, "F16", 16},        {DType::BF16, "BF16", 16},
    {DType::I32, "I32", 32},        {DType::U32, "U32", 32},
    {DType::F32, "F32", 32},        {DType::C64, "C64", 64},
    {DType::F64, "F64", 64},        {DType::I64, "I64", 64},
    {DType::U64, "U64", 64},
}};
}  // namespace

int dtype_bits(DType t) { return kInfo[static_cast<int>(t)].bits; }
std::string_view dtype_name(DType t) { return kInfo[static_cast<int>(t)].name; }
std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.name == name) return i.type;
  return std::nullopt;
}
bool dtype_is_float_source(DType t) {
  return t == DType::F16 || t == DType::BF16 || t == DType::F32 || t == DType::F64;
}

}  // namespace selq
