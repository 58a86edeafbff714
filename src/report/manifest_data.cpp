#include "report/manifest_data.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/module_names.h"

namespace fs = std::filesystem;

namespace selq::report {

bool ManifestData::planned() const { return recipe_text.starts_with("# Planned by selq"); }

std::vector<std::string> ManifestData::quantized_formats() const {
  std::vector<std::string> out;
  for (const auto& f : formats)
    if (f != kUnquantized && f != "pre-quantized") out.push_back(f);
  return out;
}

namespace {

std::uint64_t bytes_of(const std::string& dtype, const Shape& shape, const std::string& path, const std::string& tensor) {
  auto dt = dtype_from_name(dtype);
  if (!dt) throw_bad_input(fmt::format("{}: tensor {}: unknown dtype '{}'", path, tensor, dtype));
  return dtype_nbytes(*dt, shape_numel(shape));
}

}  // namespace

ManifestData load_manifest(const std::string& dir) {
  ManifestData m;
  m.dir = dir;
  m.path = (fs::path(dir) / io::kManifestName).string();
  std::error_code ec;
  if (!fs::is_regular_file(m.path, ec))
    throw_bad_input(fmt::format("{}: no {} (not a checkpoint written by selq quantize)", dir, io::kManifestName));
  // Keys the report does not read are dropped while parsing: a 70,000-tensor
  // manifest is 60 MB, and its hashes, names and per-format lists would double
  // the tree's memory and time.
  static const std::set<std::string> kUnused = {"formats", "xxh3", "source_xxh3", "shard", "calibration",
                                                "blocks", "clipped_blocks", "clipped_elements", "elements",
                                                "max_abs_err", "rel_frobenius", "cosine"};
  const nlohmann::json::parser_callback_t keep = [](int depth, nlohmann::json::parse_event_t event,
                                                    nlohmann::json& parsed) {
    if (event != nlohmann::json::parse_event_t::key) return true;
    const auto& k = parsed.get_ref<const std::string&>();
    return !kUnused.count(k) && !(k == "name" && depth > 2);  // outputs' names, not the recipe's
  };
  const auto j = nlohmann::json::parse(io::read_file(m.path), keep, false);
  if (j.is_discarded() || !j.is_object()) throw_bad_input(fmt::format("{}: not valid JSON", m.path));
  std::string current = "(header)";
  try {
    m.source = j.value("source", "");
    m.dialect = j.value("dialect", "");
    if (j.contains("recipe") && j["recipe"].is_object()) {
      m.recipe_name = j["recipe"].value("name", "");
      m.recipe_text = j["recipe"].value("text", "");
    }
    std::set<std::string> formats;
    const auto& tensors = j.at("tensors");
    m.tensors.reserve(tensors.size());
    for (const auto& t : tensors) {
      TensorEntry e;
      e.name = t.at("source").get<std::string>();
      current = e.name;
      e.format = t.at("format").get<std::string>();
      e.shape = t.at("source_shape").get<Shape>();
      e.source_bytes = bytes_of(t.at("source_dtype").get<std::string>(), e.shape, m.path, e.name);
      for (const auto& o : t.at("outputs"))
        e.stored_bytes += bytes_of(o.at("dtype").get<std::string>(), o.at("shape").get<Shape>(), m.path, e.name);
      e.quantized = t.contains("scheme");
      if (e.quantized) {
        if (!t.contains("metrics") || !t["metrics"].is_object())
          throw_bad_input(fmt::format("{}: tensor {} ({}) has no error metrics; the report needs a manifest written "
                                      "by selq quantize with per-tensor metrics",
                                      m.path, e.name, e.format));
        const auto& snr = t["metrics"].at("snr_db");
        // The manifest writes a non-finite SNR (no error at all) as null.
        e.snr_db = snr.is_null() ? std::numeric_limits<double>::infinity() : snr.get<double>();
      }
      e.module = t.contains("module") ? t["module"].get<std::string>()
                 : e.name.ends_with(".weight") ? e.name.substr(0, e.name.size() - 7)
                                               : e.name;
      e.linear = e.quantized || (e.shape.size() == 2 && e.name.ends_with(".weight"));
      if (auto l = pipeline::layer_index_of(e.module)) {
        e.layer = *l;
        e.kind = pipeline::layer_relative_kind(e.module);
        m.layers = std::max(m.layers, e.layer + 1);
      } else {
        e.kind = e.module;
      }
      formats.insert(e.format);
      m.tensors.push_back(std::move(e));
    }
    m.formats.assign(formats.begin(), formats.end());
  } catch (const nlohmann::json::exception& e) {
    throw_bad_input(fmt::format("{}: tensor {}: malformed manifest entry: {}", m.path, current, e.what()));
  }
  if (m.tensors.empty()) throw_bad_input(fmt::format("{}: no tensors", m.path));
  return m;
}

}  // namespace selq::report
