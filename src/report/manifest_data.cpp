#include "report/manifest_data.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "recipe/names.h"
#include "recipe/recipe.h"

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

// One tensor of the manifest as the SAX reader sees it.
struct RawTensor {
  std::map<std::string, std::string> text;  // format, module, scheme, source, source_dtype
  Shape source_shape;
  std::vector<std::pair<std::string, Shape>> outputs;  // dtype, shape
  bool metrics{false};
  std::optional<double> snr_db;  // null in the file: no error at all
  bool snr_seen{false};
};

// Reads the manifest with nlohmann's SAX interface, keeping only what the
// report draws: a 70,000-tensor manifest is 60 MB, and as a DOM it took
// ~370 MB and most of the report's time.
class ManifestSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::map<std::string, std::string> header, recipe;
  std::vector<RawTensor> tensors;
  std::optional<GptqData> gptq;
  std::map<std::string, double> calibration_expert_tokens;
  std::string error;

  bool null() override { return value(std::nullopt, nullptr); }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t v) override { return value(static_cast<double>(v), nullptr); }
  bool number_unsigned(number_unsigned_t v) override { return value(static_cast<double>(v), nullptr); }
  bool number_float(number_float_t v, const string_t&) override { return value(v, nullptr); }
  bool string(string_t& v) override { return value(std::nullopt, &v); }
  bool binary(binary_t&) override { return true; }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) override {
    error = fmt::format("not valid JSON at byte {}: {}", position, e.what());
    return false;
  }

 private:
  std::vector<std::string> path_;  // key of each open container ("#": an array element)
  std::vector<bool> array_;        // whether each open container is an array
  std::string key_;

  bool in(std::initializer_list<const char*> p) const {
    if (path_.size() != p.size()) return false;
    std::size_t i = 0;
    for (const char* k : p)
      if (path_[i++] != k) return false;
    return true;
  }
  bool open(bool array) {
    path_.push_back(path_.empty() ? "" : array_.back() ? "#" : key_);
    array_.push_back(array);
    if (in({"", "tensors", "#"})) tensors.emplace_back();
    if (in({"", "tensors", "#", "metrics"})) tensors.back().metrics = true;
    if (in({"", "tensors", "#", "outputs", "#"})) tensors.back().outputs.emplace_back();
    if (in({"", "gptq_calibration"})) gptq.emplace();
    if (in({"", "gptq_calibration", "gate"})) gptq->gated = true;
    if (gate_module()) gptq->modules.push_back({path_.back(), "", 0, 0});
    return true;
  }
  bool close() {
    path_.pop_back();
    array_.pop_back();
    return true;
  }
  // Inside gptq_calibration.gate.modules.<module>.
  bool gate_module() const {
    return path_.size() == 5 && path_[1] == "gptq_calibration" && path_[2] == "gate" && path_[3] == "modules";
  }
  void gptq_value(std::optional<double> num, const std::string* str) {
    const double v = num.value_or(0);
    if (in({"", "gptq_calibration"})) {
      if (str && key_ == "text") gptq->text = *str;
      if (key_ == "tokens") gptq->tokens = v;
      if (key_ == "context") gptq->context = v;
    } else if (in({"", "gptq_calibration", "gate"})) {
      if (key_ == "held_out_sequences") gptq->held_out_sequences = v;
      if (key_ == "kept_gptq") gptq->kept_gptq = v;
      if (key_ == "kept_nearest") gptq->kept_nearest = v;
    } else if (in({"", "gptq_calibration", "module_tokens"}) && num) {
      gptq->module_tokens[key_] = v;
    } else if (in({"", "gptq_calibration", "unreached"}) && str) {
      gptq->unreached.push_back(*str);
    } else if (gate_module()) {
      auto& e = gptq->modules.back();
      if (str && key_ == "kept") e.kept = *str;
      if (key_ == "gptq_error") e.gptq_error = v;
      if (key_ == "nearest_error") e.nearest_error = v;
    }
  }
  bool value(std::optional<double> num, const std::string* str) {
    if (gptq && path_.size() >= 2 && path_[1] == "gptq_calibration") gptq_value(num, str);
    if (in({""}) && str && (key_ == "source" || key_ == "dialect")) header[key_] = *str;
    else if (in({"", "recipe"}) && str) recipe[key_] = *str;
    else if (in({"", "calibration", "expert_tokens"}) && num) calibration_expert_tokens[key_] = *num;
    else if (in({"", "tensors", "#"}) && str) tensors.back().text[key_] = *str;
    else if (in({"", "tensors", "#", "source_shape"}) && num) tensors.back().source_shape.push_back(static_cast<std::int64_t>(*num));
    else if (in({"", "tensors", "#", "metrics"}) && key_ == "snr_db" && !str) {
      tensors.back().snr_db = num;
      tensors.back().snr_seen = true;
    } else if (in({"", "tensors", "#", "outputs", "#"}) && key_ == "dtype" && str) tensors.back().outputs.back().first = *str;
    else if (in({"", "tensors", "#", "outputs", "#", "shape"}) && num)
      tensors.back().outputs.back().second.push_back(static_cast<std::int64_t>(*num));
    return true;
  }
};

}  // namespace

ManifestData load_manifest(const std::string& dir) {
  ManifestData m;
  m.dir = dir;
  m.path = (fs::path(dir) / io::kManifestName).string();
  std::error_code ec;
  if (!fs::is_regular_file(m.path, ec))
    throw_bad_input(fmt::format("{}: no {} (not a checkpoint written by selq quantize)", dir, io::kManifestName));
  ManifestSax sax;
  const std::string text = io::read_file(m.path);
  if (!nlohmann::json::sax_parse(text, &sax)) throw_bad_input(fmt::format("{}: {}", m.path, sax.error));
  if (!sax.header.count("source") || sax.tensors.empty())
    throw_bad_input(fmt::format("{}: not a selq manifest (no source or no tensors)", m.path));
  m.source = sax.header["source"];
  m.dialect = sax.header["dialect"];
  m.recipe_name = sax.recipe["name"];
  m.recipe_text = sax.recipe["text"];
  m.gptq = std::move(sax.gptq);
  m.calibration_expert_tokens = std::move(sax.calibration_expert_tokens);
  std::set<std::string> formats;
  m.tensors.reserve(sax.tensors.size());
  for (std::size_t i = 0; i < sax.tensors.size(); ++i) {
    auto& r = sax.tensors[i];
    TensorEntry e;
    e.name = r.text["source"];
    e.format = r.text["format"];
    const std::string& source_dtype = r.text["source_dtype"];
    if (e.name.empty() || e.format.empty() || source_dtype.empty() || r.outputs.empty())
      throw_bad_input(fmt::format("{}: tensor #{} {}: malformed manifest entry (needs source, format, source_dtype, "
                                  "source_shape and outputs)",
                                  m.path, i, e.name));
    e.shape = std::move(r.source_shape);
    e.source_bytes = bytes_of(source_dtype, e.shape, m.path, e.name);
    for (const auto& [dtype, shape] : r.outputs) e.stored_bytes += bytes_of(dtype, shape, m.path, e.name);
    e.quantized = r.text.count("scheme") > 0;
    if (e.quantized) {
      if (!r.metrics || !r.snr_seen)
        throw_bad_input(fmt::format("{}: tensor {} ({}) has no error metrics; the report needs a manifest written "
                                    "by selq quantize with per-tensor metrics",
                                    m.path, e.name, e.format));
      // The manifest writes a non-finite SNR (no error at all) as null.
      e.snr_db = r.snr_db.value_or(std::numeric_limits<double>::infinity());
    }
    e.module = r.text.count("module") ? r.text["module"]
               : e.name.ends_with(".weight") ? e.name.substr(0, e.name.size() - 7)
                                             : e.name;
    e.linear = e.quantized || (e.shape.size() == 2 && e.name.ends_with(".weight"));
    if (auto l = recipe::layer_index_of(e.module)) {
      e.layer = *l;
      e.kind = recipe::layer_relative_kind(e.module);
      m.layers = std::max(m.layers, e.layer + 1);
    } else {
      e.kind = e.module;
    }
    formats.insert(e.format);
    m.tensors.push_back(std::move(e));
  }
  m.formats.assign(formats.begin(), formats.end());
  return m;
}

}  // namespace selq::report
