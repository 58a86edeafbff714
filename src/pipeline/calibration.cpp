#include "pipeline/calibration.h"

#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace selq::pipeline {

std::map<std::string, float> load_activation_amax(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw_bad_input(fmt::format("calibration file is not JSON: {}", e.what()), {path, "", e.byte});
  }
  if (!j.is_object() || j.value("format", "") != "selq-calibration-v1")
    throw_bad_input("not a selq calibration file (expected \"format\": \"selq-calibration-v1\", "
                    "as written by `selq calibrate`)",
                    {path});
  auto it = j.find("activation_amax");
  if (it == j.end() || !it->is_object()) throw_bad_input("calibration file has no \"activation_amax\" object", {path});
  std::map<std::string, float> out;
  for (const auto& [module, v] : it->items()) {
    if (!v.is_number()) throw_bad_input("activation amax is not a number", {path, module});
    const double a = v.get<double>();
    if (!(a > 0.0) || !std::isfinite(a))
      throw_bad_input(fmt::format("activation amax {} is not positive and finite", a), {path, module});
    out[module] = static_cast<float>(a);
  }
  return out;
}

nlohmann::json load_calibration_provenance(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(path), nullptr, false);
  nlohmann::json out = j.is_object() && j.contains("text_provenance") && j["text_provenance"].is_object()
                           ? j["text_provenance"]
                           : nlohmann::json::object();
  out["path"] = path;
  return out;
}

}  // namespace selq::pipeline
