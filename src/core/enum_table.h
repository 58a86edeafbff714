#pragma once
// Tables with one row per value of an enum (scheme kinds, activation modes,
// each dialect's kinds): checked at compile time that row i describes value i
// and is filled in, so a new enum value does not compile until every table
// has its row.
#include <array>
#include <cstddef>

namespace selq {

// `key(row)` is the row's enum value, `filled(row)` false for a
// zero-initialized (forgotten) row.
template <std::size_t Count, class Row, std::size_t N, class Key, class Filled>
constexpr bool rows_in_enum_order(const std::array<Row, N>& rows, Key key, Filled filled) {
  if (N != Count) return false;
  for (std::size_t i = 0; i < N; ++i)
    if (static_cast<std::size_t>(key(rows[i])) != i || !filled(rows[i])) return false;
  return true;
}

}  // namespace selq
