#include "pipeline/inspect.h"

#include <map>
#include <set>

#include <fmt/format.h>

#include "core/format_bytes.h"

#include "recipe/recipe.h"

namespace selq::pipeline {

namespace {

// Storage label of a module from the tensors it owns: a plain dtype ("BF16"),
// or the quantized form ("F8_E4M3+scale", "U8 packed+F8_E4M3 scale").
std::string module_storage(const std::map<std::string, std::string>& parts) {
  if (parts.count("weight_packed")) {
    std::string s = parts.at("weight_packed") + " packed";
    if (parts.count("weight_scale")) s += " + " + parts.at("weight_scale") + " scale";
    if (parts.count("weight_global_scale") || parts.count("weight_scale_2")) s += " + global";
    return s;
  }
  if (!parts.count("weight")) return "";
  std::string s = parts.at("weight");
  for (const char* k : {"weight_scale", "weight_scale_inv"})
    if (parts.count(k)) s += fmt::format(" + {} {}", parts.at(k), k);
  if (parts.count("weight_scale_2")) s += " + global";
  return s;
}


}  // namespace

nlohmann::json inspect_checkpoint(const io::Checkpoint& ckpt, bool with_tensors) {
  nlohmann::json j;
  j["path"] = ckpt.dir();
  j["shards"] = ckpt.shards();
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> by_dtype;  // count, bytes
  // module -> suffix -> dtype
  std::map<std::string, std::map<std::string, std::string>> modules;
  std::uint64_t total = 0;
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : ckpt.tensors()) {
    const std::string dt(dtype_name(t.info.dtype));
    auto& d = by_dtype[dt];
    ++d.first;
    d.second += t.info.nbytes();
    total += t.info.nbytes();
    const auto dot = t.info.name.rfind('.');
    if (dot != std::string::npos) modules[t.info.name.substr(0, dot)][t.info.name.substr(dot + 1)] = dt;
    if (with_tensors)
      tensors.push_back({{"name", t.info.name}, {"dtype", dt}, {"shape", t.info.shape},
                         {"bytes", t.info.nbytes()}, {"shard", t.shard}});
  }
  nlohmann::json dtypes = nlohmann::json::object();
  for (const auto& [dt, cb] : by_dtype) dtypes[dt] = {{"count", cb.first}, {"bytes", cb.second}};
  j["dtypes"] = dtypes;
  j["tensor_count"] = ckpt.tensors().size();
  j["total_bytes"] = total;

  // Per layer: projection kind -> storage.
  std::map<int, std::map<std::string, std::string>> layers;
  for (const auto& [module, parts] : modules) {
    const auto layer = recipe::layer_index_of(module);
    const std::string storage = module_storage(parts);
    if (!layer || storage.empty()) continue;
    layers[*layer][recipe::layer_relative_kind(module)] = storage;
  }
  nlohmann::json jl = nlohmann::json::array();
  for (const auto& [layer, kinds] : layers) jl.push_back({{"layer", layer}, {"modules", kinds}});
  j["layers"] = jl;
  const auto& cfg = ckpt.config();
  j["quantization_config"] = cfg.is_object() && cfg.contains("quantization_config") ? cfg["quantization_config"] : nullptr;
  if (with_tensors) j["tensors"] = tensors;
  return j;
}

std::string format_inspection(const nlohmann::json& j, bool with_tensors) {
  std::string out = fmt::format("{}: {} tensors in {} shard(s), {}\n\n", j["path"].get<std::string>(),
                                j["tensor_count"].get<std::uint64_t>(), j["shards"].size(),
                                format_bytes(j["total_bytes"].get<std::uint64_t>()));
  out += fmt::format("{:<12} {:>8} {:>12}\n", "dtype", "tensors", "bytes");
  for (const auto& [dt, v] : j["dtypes"].items())
    out += fmt::format("{:<12} {:>8} {:>12}\n", dt, v["count"].get<std::uint64_t>(),
                       format_bytes(v["bytes"].get<std::uint64_t>()));
  if (!j["layers"].empty()) {
    out += "\nper layer (runs of identical layers folded):\n";
    const auto& layers = j["layers"];
    std::size_t i = 0;
    while (i < layers.size()) {
      std::size_t k = i;
      while (k + 1 < layers.size() && layers[k + 1]["modules"] == layers[i]["modules"] &&
             layers[k + 1]["layer"].get<int>() == layers[k]["layer"].get<int>() + 1)
        ++k;
      const int a = layers[i]["layer"], b = layers[k]["layer"];
      out += a == b ? fmt::format("  layer {}:\n", a) : fmt::format("  layers {}-{}:\n", a, b);
      for (const auto& [kind, storage] : layers[i]["modules"].items())
        out += fmt::format("    {:<40} {}\n", kind, storage.get<std::string>());
      i = k + 1;
    }
  }
  if (!j["quantization_config"].is_null())
    out += "\nquantization_config:\n" + j["quantization_config"].dump(2) + "\n";
  else
    out += "\nno quantization_config\n";
  if (with_tensors) {
    out += "\ntensors:\n";
    for (const auto& t : j["tensors"])
      out += fmt::format("  {:<64} {:<8} {:<20} {:>12}\n", t["name"].get<std::string>(), t["dtype"].get<std::string>(),
                         t["shape"].dump(), t["bytes"].get<std::uint64_t>());
  }
  return out;
}

}  // namespace selq::pipeline
