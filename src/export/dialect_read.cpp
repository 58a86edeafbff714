// Scheme reconstruction reads no dialect keys of its own: every scheme selq
// can write is written with the dialect's own writer, and a config object (or
// a manifest name) is recognized when it equals one of them.
#include "export/dialect_read.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include "core/error.h"
#include "export/dialect_internal.h"

namespace selq::exporter {

using quant::SchemeSpec;
using nlohmann::json;

std::optional<Dialect> dialect_of_config(const json& qc) {
  if (!qc.is_object()) return std::nullopt;
  if (auto d = dialect_from_name(qc.value("quant_method", ""))) return d;
  if (qc.contains("quantization") || qc.contains("quant_algo")) return Dialect::ModelOpt;
  return std::nullopt;
}

std::optional<std::string> unread_quant_method(const json& qc) {
  if (!qc.is_object() || qc.empty() || dialect_of_config(qc)) return std::nullopt;
  const std::string method = qc.contains("quant_method") && qc["quant_method"].is_string()
                                 ? qc["quant_method"].get<std::string>()
                                 : std::string("(none)");
  if (method == "fp8") return std::nullopt;  // native_fp8_config reads it or names what it refuses
  return method;
}

namespace {

struct AdaptedCandidates {
  std::vector<SchemeSpec> specs;
  std::vector<json> configs;  // comparable config per spec; null when not expressible
};

// Per dialect and model dtype, built once (verify asks once per module).
const AdaptedCandidates& candidates(Dialect d, DType model_dtype) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, AdaptedCandidates> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_pair(static_cast<int>(d), static_cast<int>(model_dtype));
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  AdaptedCandidates out;
  for (const auto& s : quant::writable_schemes()) {
    try {
      check_dialect_supports(d, s);
      out.specs.push_back(adapt_scheme_for_dialect(d, s, model_dtype));
    } catch (const Error&) {
      continue;  // the dialect cannot express it, so no config of that dialect names it
    }
    try {
      out.configs.push_back(comparable_scheme_config(d, scheme_config_json(d, out.specs.back())));
    } catch (const Error&) {
      out.configs.emplace_back();  // matches no config object
    }
  }
  return cache.emplace(key, std::move(out)).first->second;
}

}  // namespace

std::optional<SchemeSpec> scheme_from_config_json(Dialect d, const json& scheme_json, DType model_dtype) {
  const auto& c = candidates(d, model_dtype);
  const json wanted = comparable_scheme_config(d, scheme_json);
  for (std::size_t i = 0; i < c.specs.size(); ++i)
    if (!c.configs[i].is_null() && c.configs[i] == wanted) return c.specs[i];
  return std::nullopt;
}

std::optional<SchemeSpec> scheme_from_config_json_any_dtype(Dialect d, const json& scheme_json) {
  for (DType model_dtype : {DType::BF16, DType::F16, DType::F32})
    if (auto s = scheme_from_config_json(d, scheme_json, model_dtype)) return s;
  return std::nullopt;
}

std::optional<SchemeSpec> scheme_from_name(Dialect d, const std::string& name, DType model_dtype) {
  for (const auto& s : candidates(d, model_dtype).specs)
    if (s.name() == name) return s;
  return std::nullopt;
}

std::vector<ConfigModuleEntry> config_module_entries(Dialect d, const json& qc) {
  return detail::dialect_ops(d).module_entries(qc);
}

std::vector<std::string> unimplemented_numerics(Dialect d, const json& qc) {
  return detail::dialect_ops(d).unimplemented_numerics(qc);
}

Engine vllm_engine_for(Dialect d) { return detail::dialect_ops(d).engines.front(); }

nlohmann::json side_file_config(const std::string& checkpoint_dir) {
  for (auto d : kAllDialects) {
    const char* f = detail::dialect_ops(d).side_file;
    if (!f) continue;
    std::ifstream in(std::filesystem::path(checkpoint_dir) / f);
    if (!in) continue;
    auto j = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (j.is_object()) return j;
  }
  return nullptr;
}

bool is_config_side_file(const std::string& file_name) {
  for (auto d : kAllDialects)
    if (const char* f = detail::dialect_ops(d).side_file; f && file_name == f) return true;
  return false;
}

}  // namespace selq::exporter
