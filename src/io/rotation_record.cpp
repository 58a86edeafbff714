#include "io/rotation_record.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"

namespace selq::io {

nlohmann::json read_rotation_record(const std::string& dir) {
  const auto f = std::filesystem::path(dir) / kRotationRecordName;
  if (!std::filesystem::exists(f)) return nullptr;
  nlohmann::json j = nlohmann::json::parse(read_file(f.string()), nullptr, false);
  if (!j.is_object() || !j.contains("rotation") || !j["rotation"].is_string())
    throw_bad_input(fmt::format("{} is not a rotation record (a JSON object with a 'rotation')", f.string()), {f.string()});
  return j;
}

}  // namespace selq::io
