#include "pipeline/calibration.h"

#include <cmath>
#include <cstring>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/safetensors_hash.h"

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

InputMoments load_input_moments(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(path), nullptr, false);
  const auto it = j.is_object() ? j.find("input_moments") : j.end();
  if (!j.is_object() || it == j.end() || !it->is_object() || !(*it)["file"].is_string() ||
      !(*it)["content_xxh3"].is_string())
    throw_bad_input("calibration file names no input second moments (rounding 'weighted' needs them): run "
                    "`selq calibrate SRC -o calib.json` with this selq, which writes them beside the JSON",
                    {path});
  const std::string file = (*it)["file"].get<std::string>();
  const std::string dir = io::parent_dir(path);
  const std::string mpath = file.starts_with('/') || dir == "." ? file : dir + "/" + file;
  const auto hash = io::file_content_hash(mpath);
  if (!hash)
    throw_bad_input(fmt::format("the input second moments it names, {}, are missing or not a safetensors file", mpath),
                    {path});
  if (fmt::format("{:016x}", *hash) != (*it)["content_xxh3"].get<std::string>())
    throw_bad_input(fmt::format("{} is not the moments file this calibration wrote (content hash {:016x}, the JSON "
                                "says {}); calibrate again",
                                mpath, *hash, (*it)["content_xxh3"].get<std::string>()),
                    {path});
  const auto f = io::SafetensorsFile::open(mpath);
  InputMoments out;
  for (const auto& e : f->entries()) {
    if (e.info.dtype != DType::F32 || e.info.shape.size() != 1)
      throw_bad_input(fmt::format("input moments of '{}' are {} {}, expected F32 [in]", e.info.name,
                                  dtype_name(e.info.dtype), shape_to_string(e.info.shape)),
                      {mpath, e.info.name});
    const TensorView v = f->view(e.info.name);
    auto m = std::make_shared<std::vector<float>>(static_cast<std::size_t>(e.info.shape[0]));
    std::memcpy(m->data(), v.bytes.data(), v.bytes.size());
    for (std::size_t c = 0; c < m->size(); ++c)
      if (!((*m)[c] >= 0.0f) || !std::isfinite((*m)[c]))
        throw_bad_input(fmt::format("input moment {} of '{}' is {}, expected finite and non-negative", c,
                                    e.info.name, (*m)[c]),
                        {mpath, e.info.name});
    out[e.info.name] = std::move(m);
  }
  return out;
}

nlohmann::json load_calibration_provenance(const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(io::read_file(path), nullptr, false);
  nlohmann::json out = j.is_object() && j.contains("text_provenance") && j["text_provenance"].is_object()
                           ? j["text_provenance"]
                           : nlohmann::json::object();
  out["path"] = path;
  // A MoE's routed experts: the tokens each received, and those no token reached with the
  // module whose amax they were given (the report's table, and what a reader checks).
  if (j.is_object() && j.contains("expert_tokens") && j["expert_tokens"].is_object()) {
    out["expert_tokens"] = j["expert_tokens"];
    out["unreached_experts"] = j.value("unreached_experts", nlohmann::json::object());
    out["unreached_expert_rule"] = j.value("unreached_expert_rule", "");
  }
  return out;
}

}  // namespace selq::pipeline
