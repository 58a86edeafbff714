#include "core/spoken_list.h"

namespace selq {

std::string spoken_list(const std::vector<std::string>& items, std::string_view conjunction) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i + 1 == items.size() && i > 0) {
      out.push_back(' ');
      out.append(conjunction);
      out.push_back(' ');
    } else if (i > 0) {
      out.append(", ");
    }
    out.append(items[i]);
  }
  return out;
}

}  // namespace selq
