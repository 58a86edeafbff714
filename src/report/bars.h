#pragma once
// Horizontal bars of bytes before and after quantization, one pair per row
// (a format or a module kind), with the sizes and their ratio written out.
#include <cstdint>
#include <string>
#include <vector>

namespace selq::report {

struct SizeBar {
  std::string label;
  std::uint64_t before{0}, after{0};
  std::string color;  // of the "after" bar
};

// BadInput for no rows. `id` names the SVG element.
std::string render_size_bars(const std::string& id, const std::string& title, const std::vector<SizeBar>& rows);

}  // namespace selq::report
