#pragma once
// Pieces of JSON text written straight into a string, for the few large JSON
// documents selq writes (safetensors headers, the manifest): as nlohmann
// trees they cost seconds at 70,000 tensors (docs/BENCHMARKS.md, "The
// manifest as text").
#include <string>
#include <string_view>

namespace selq {

// `s` as a JSON string literal, quoted. Strings with nothing to escape (the
// usual tensor names) are copied as they are; the others are escaped by
// nlohmann::json, as before.
void append_json_string(std::string& out, std::string_view s);

}  // namespace selq
