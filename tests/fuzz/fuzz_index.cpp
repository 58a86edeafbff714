// libFuzzer target: the index parser must throw selq::Error or return a
// weight_map whose every path stays inside the checkpoint directory.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"
#include "io/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    for (const auto& [tensor, shard] : selq::io::parse_index_json(text, "fuzz.index.json")) {
      if (shard.empty() || shard.front() == '/') std::abort();
      std::size_t start = 0;
      while (start <= shard.size()) {
        std::size_t slash = shard.find('/', start);
        if (slash == std::string::npos) slash = shard.size();
        if (shard.compare(start, slash - start, "..") == 0 && slash - start == 2) std::abort();
        start = slash + 1;
      }
    }
  } catch (const selq::Error&) {
  }
  return 0;
}
