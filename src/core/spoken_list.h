#pragma once
// A list as a sentence says it, for messages and --help: {"a", "b", "c"} with
// "or" -> "a, b or c"; one item alone; empty for none.
#include <string>
#include <string_view>
#include <vector>

namespace selq {

std::string spoken_list(const std::vector<std::string>& items, std::string_view conjunction);

}  // namespace selq
