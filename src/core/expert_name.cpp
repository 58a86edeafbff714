#include "core/expert_name.h"

#include <algorithm>

namespace selq {

namespace {

// Calls `at_experts(end)` for each component "experts" that another follows
// (`end`: where the component ends) until it returns true; whether one did.
template <typename F>
bool for_each_experts_component(std::string_view name, F at_experts) {
  static constexpr std::string_view kExperts = "experts";
  for (std::size_t at = 0; at <= name.size();) {
    const std::size_t end = std::min(name.find('.', at), name.size());
    if (name.substr(at, end - at) == kExperts && end < name.size() && at_experts(end)) return true;
    if (end == name.size()) break;
    at = end + 1;
  }
  return false;
}

}  // namespace

std::optional<RoutedExpertName> parse_routed_expert(std::string_view name) {
  std::optional<RoutedExpertName> out;
  for_each_experts_component(name, [&](std::size_t end) {
    const std::size_t i0 = end + 1, i1 = std::min(name.find('.', i0), name.size());
    const std::string_view index = name.substr(i0, i1 - i0);
    if (index.empty() || !std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return false;
    out = RoutedExpertName{name.substr(0, end), index, i1 < name.size() ? name.substr(i1 + 1) : std::string_view{}};
    return true;
  });
  return out;
}

std::optional<std::string_view> experts_container(std::string_view name) {
  std::optional<std::string_view> out;
  for_each_experts_component(name, [&](std::size_t end) {
    out = name.substr(0, end);
    return true;
  });
  return out;
}

}  // namespace selq
