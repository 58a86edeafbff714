#include "pipeline/manifest.h"

#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <oneapi/tbb/parallel_invoke.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

namespace {

nlohmann::json metrics_json(const quant::ErrorMetrics& m) {
  return {{"rel_frobenius", m.rel_frobenius()}, {"snr_db", m.snr_db()},       {"cosine", m.cosine()},
          {"max_abs_err", m.max_abs_err},       {"elements", m.elements},      {"clipped_elements", m.clipped_elements},
          {"blocks", m.blocks},                 {"clipped_blocks", m.clipped_blocks}};
}

// Files the quantized checkpoint replaces rather than copies.
bool is_regenerated(const std::string& name) {
  return name == "config.json" || name == io::kIndexName || name == "hf_quant_config.json" ||
         name == kManifestName || name == kReportName;
}

}  // namespace

void write_checkpoint_files(const io::Checkpoint& source, const Plan& plan, const std::string& dir, RunMode mode) {
  // Non-tensor files (tokenizer, generation config, remote code) verbatim.
  if (mode == RunMode::FileToFile)
    for (const auto& name : source.other_files())
      if (!is_regenerated(name)) source.copy_other_file(name, (fs::path(dir) / name).string());

  exporter::ConfigInput ci;
  ci.linear_modules = plan.linear_modules;
  const nlohmann::json& src_config = source.config();
  if (src_config.is_object() && src_config.contains("quantization_config"))
    ci.source_quantization_config = src_config["quantization_config"];
  exporter::ConfigOutput co = exporter::build_quantization_config(plan.dialect, ci);
  nlohmann::json config = src_config.is_object() ? src_config : nlohmann::json::object();
  if (co.quantization_config.is_null())
    config.erase("quantization_config");
  else
    config["quantization_config"] = co.quantization_config;
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config.dump(2) + "\n");
  for (const auto& [name, content] : co.extra_files)
    io::write_file_atomic((fs::path(dir) / name).string(), content);

  if (plan.shards.size() > 1 || source.has_index()) {
    std::map<std::string, std::string> weight_map;
    std::uint64_t total = 0;
    for (const auto& s : plan.shards)
      for (auto i : s.tensors)
        for (const auto& o : plan.tensors[i].outputs) {
          weight_map[o.info.name] = s.name;
          total += o.info.nbytes();
        }
    io::write_index((fs::path(dir) / io::kIndexName).string(), weight_map, total);
  }
}

std::string hash_hex(std::uint64_t h) { return fmt::format("{:016x}", h); }

nlohmann::json build_manifest(const Plan& plan, const recipe::Recipe& recipe,
                              const std::vector<TensorRecord>& records, RunMode mode) {
  nlohmann::json m;
  m["selq_version"] = SELQ_VERSION;
  m["in_place"] = mode == RunMode::InPlace;
  m["source"] = plan.source;
  m["dialect"] = exporter::dialect_name(plan.dialect);
  m["recipe"] = {{"path", recipe.path}, {"name", recipe.name}, {"text", recipe.text}};
  nlohmann::json formats = nlohmann::json::object();
  nlohmann::json tensors = nlohmann::json::array();
  std::map<std::string, std::string> shard_of;
  for (const auto& s : plan.shards)
    for (auto i : s.tensors)
      for (const auto& o : plan.tensors[i].outputs) shard_of[o.info.name] = s.name;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = plan.tensors[i];
    const auto& r = records[i];
    nlohmann::json e;
    e["source"] = t.source;
    e["source_dtype"] = dtype_name(t.source_info.dtype);
    e["source_shape"] = t.source_info.shape;
    e["source_xxh3"] = hash_hex(r.source_hash);
    std::string format;
    if (t.scheme) {
      format = t.scheme->name();
      e["scheme"] = format;
      e["module"] = t.module;
    } else {
      format = t.action == recipe::Action::PassThrough ? "pre-quantized" : "unquantized";
    }
    e["format"] = format;
    nlohmann::json outs = nlohmann::json::array();
    for (std::size_t k = 0; k < t.outputs.size(); ++k) {
      const auto& o = t.outputs[k];
      outs.push_back({{"name", o.info.name},
                      {"dtype", dtype_name(o.info.dtype)},
                      {"shape", o.info.shape},
                      {"shard", shard_of[o.info.name]},
                      {"xxh3", k < r.output_hashes.size() ? hash_hex(r.output_hashes[k]) : ""}});
    }
    e["outputs"] = std::move(outs);
    if (r.metrics) e["metrics"] = metrics_json(*r.metrics);
    formats[format].push_back(t.source);
    tensors.push_back(std::move(e));
  }
  m["formats"] = std::move(formats);
  m["tensors"] = std::move(tensors);
  return m;
}

nlohmann::json write_manifest_and_report(const Plan& plan, const recipe::Recipe& recipe,
                                         const std::vector<TensorRecord>& records, const std::string& dir,
                                         RunMode mode) {
  nlohmann::json manifest;
  tbb::parallel_invoke(
      [&] {
        manifest = build_manifest(plan, recipe, records, mode);
        io::write_file_atomic((fs::path(dir) / kManifestName).string(), manifest.dump(1) + "\n");
      },
      [&] { io::write_file_atomic((fs::path(dir) / kReportName).string(), format_plan(plan)); });
  return manifest;
}

nlohmann::json finalize_checkpoint(const io::Checkpoint& source, const Plan& plan,
                                   const recipe::Recipe& recipe, const std::vector<TensorRecord>& records,
                                   const std::string& dir, RunMode mode) {
  nlohmann::json manifest;
  tbb::parallel_invoke([&] { manifest = write_manifest_and_report(plan, recipe, records, dir, mode); },
                       [&] { write_checkpoint_files(source, plan, dir, mode); });
  return manifest;
}

}  // namespace selq::pipeline
