#include "export/native_fp8.h"

#include <fmt/format.h>

#include "core/error.h"

namespace selq::exporter {

using nlohmann::json;

std::optional<NativeFp8> native_fp8_config(const json& qc, const std::string& config_path) {
  if (!qc.is_object() || qc.value("quant_method", json()) != "fp8") return std::nullopt;
  auto refuse = [&](const std::string& what) {
    throw_unsupported(fmt::format("quantization_config (quant_method fp8): {}", what), {config_path});
  };
  if (qc.contains("fmt") && qc["fmt"] != "e4m3") refuse(fmt::format("fmt {} is not e4m3", qc["fmt"].dump()));
  if (qc.contains("activation_scheme") && qc["activation_scheme"] != "dynamic")
    refuse(fmt::format("activation_scheme {} is not dynamic (static input scales are not implemented for this "
                       "format)",
                       qc["activation_scheme"].dump()));
  if (!qc.contains("weight_block_size") || qc["weight_block_size"].is_null())
    refuse("no weight_block_size (per-tensor FP8 in this form is not implemented)");
  const json& b = qc["weight_block_size"];
  if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
      b[0].get<int>() <= 0 || b[1].get<int>() <= 0)
    throw_bad_input(fmt::format("quantization_config.weight_block_size {} is not [rows, cols]", b.dump()),
                    {config_path});
  NativeFp8 f;
  f.scheme.kind = quant::SchemeKind::FP8Block;
  f.scheme.block_rows = b[0].get<int>();
  f.scheme.block_cols = b[1].get<int>();
  f.scheme.scale_dtype = DType::F32;
  f.scheme.act = quant::ActMode::FP8PerTokenGroup128;
  for (const char* key : {"modules_to_not_convert", "ignored_layers"})
    if (qc.contains(key) && qc[key].is_array())
      for (const auto& m : qc[key])
        if (m.is_string()) f.not_converted.push_back(m.get<std::string>());
  return f;
}

std::string native_fp8_tensor(const std::string& module, quant::OutRole role) {
  return module + (role == quant::OutRole::Weight ? ".weight" : ".weight_scale_inv");
}

bool native_fp8_not_converted(const NativeFp8& f, const std::string& module) {
  for (const auto& m : f.not_converted)
    if (module == m || module.starts_with(m + ".") || module.ends_with("." + m)) return true;
  return false;
}

}  // namespace selq::exporter
