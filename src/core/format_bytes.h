#pragma once
// Human-readable byte counts for reports ("12.29 MiB").
#include <cstdint>
#include <string>

namespace selq {

std::string format_bytes(std::uint64_t bytes);

}  // namespace selq
