#pragma once
// Facts about the machine selq runs on.
#include <cstdint>

namespace selq {

// Physical memory in bytes (0 when the system does not say).
std::uint64_t physical_memory_bytes();

}  // namespace selq
