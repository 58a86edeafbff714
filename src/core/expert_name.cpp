#include "core/expert_name.h"

#include <algorithm>

namespace selq {

std::optional<RoutedExpertName> parse_routed_expert(std::string_view name) {
  static constexpr std::string_view kExperts = "experts";
  for (std::size_t at = 0; at <= name.size();) {
    const std::size_t end = std::min(name.find('.', at), name.size());
    if (name.substr(at, end - at) == kExperts && end < name.size()) {
      const std::size_t i0 = end + 1, i1 = std::min(name.find('.', i0), name.size());
      const std::string_view index = name.substr(i0, i1 - i0);
      if (!index.empty() && std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
        return RoutedExpertName{name.substr(0, end), index, i1 < name.size() ? name.substr(i1 + 1) : std::string_view{}};
    }
    if (end == name.size()) break;
    at = end + 1;
  }
  return std::nullopt;
}

}  // namespace selq
