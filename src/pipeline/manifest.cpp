#include "pipeline/manifest.h"

#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <oneapi/tbb/parallel_invoke.h>

#include "core/error.h"
#include "core/json_text.h"
#include "export/dialect_read.h"
#include "export/module_names.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "quant/rounding_traits.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

namespace {

// Files the quantized checkpoint replaces rather than copies.
bool is_regenerated(const std::string& name) {
  return name == "config.json" || name == io::kIndexName || exporter::is_config_side_file(name) ||
         name == kManifestName || name == kReportName || name == kHtmlReportName;
}

}  // namespace

void write_checkpoint_files(const io::Checkpoint& source, const Plan& plan, const std::string& dir, RunMode mode) {
  // Non-tensor files (tokenizer, generation config, remote code) verbatim.
  if (mode == RunMode::FileToFile)
    for (const auto& name : source.other_files())
      if (!is_regenerated(name)) source.copy_other_file(name, (fs::path(dir) / name).string());

  const nlohmann::json& src_config = source.config();
  const exporter::ConfigOutput co =
      plan.config ? *plan.config : exporter::build_quantization_config(plan.dialect, config_input(source, plan));
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

namespace {

// The manifest is written as text, one line per tensor: a nlohmann tree of
// 70,000 tensors costs seconds more (docs/BENCHMARKS.md, "The manifest as text").
// Numbers are printed by fmt (shortest round trip; non-finite values become
// null, as nlohmann::json prints them), strings by append_json_string.
class ManifestText {
 public:
  explicit ManifestText(std::size_t tensors) { out_.reserve(1024 + 512 * tensors); }
  ManifestText& raw(std::string_view s) {
    out_ += s;
    return *this;
  }
  ManifestText& str(std::string_view s) {
    append_json_string(out_, s);
    return *this;
  }
  ManifestText& num(double v) {
    if (!std::isfinite(v)) return raw("null");
    fmt::format_to(std::back_inserter(out_), "{}", v);
    return *this;
  }
  ManifestText& num(std::uint64_t v) {
    fmt::format_to(std::back_inserter(out_), "{}", v);
    return *this;
  }
  ManifestText& key(std::string_view k) { return str(k).raw(": "); }
  ManifestText& shape(const Shape& shape) {
    fmt::format_to(std::back_inserter(out_), "[{}]", fmt::join(shape, ", "));
    return *this;
  }
  ManifestText& metrics(const quant::ErrorMetrics& m) {
    key("blocks").num(m.blocks).raw(", ").key("clipped_blocks").num(m.clipped_blocks).raw(", ");
    key("clipped_elements").num(m.clipped_elements).raw(", ").key("cosine").num(m.cosine()).raw(", ");
    key("elements").num(m.elements).raw(", ").key("max_abs_err").num(m.max_abs_err).raw(", ");
    return key("rel_frobenius").num(m.rel_frobenius()).raw(", ").key("snr_db").num(m.snr_db());
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string manifest_json(const Plan& plan, const recipe::Recipe& recipe, const std::vector<TensorRecord>& records,
                          RunMode mode) {
  std::map<std::string, std::string> shard_of;
  for (const auto& s : plan.shards)
    for (auto i : s.tensors)
      for (const auto& o : plan.tensors[i].outputs) shard_of[o.info.name] = s.name;
  const auto format_of = [](const PlannedTensor& t) -> std::string {
    if (t.scheme) return t.scheme->name();
    return t.action == recipe::Action::PassThrough ? "pre-quantized" : "unquantized";
  };
  std::map<std::string, std::vector<const std::string*>> formats;  // format -> source tensors, in plan order
  for (const auto& t : plan.tensors) formats[format_of(t)].push_back(&t.source);

  ManifestText m(plan.tensors.size());
  m.raw("{\n ").key("dialect").str(exporter::dialect_name(plan.dialect)).raw(",\n ").key("formats").raw("{");
  bool first = true;
  for (const auto& [format, sources] : formats) {
    m.raw(first ? "\n  " : ",\n  ").key(format).raw("[");
    for (std::size_t k = 0; k < sources.size(); ++k) m.raw(k ? ", " : "").str(*sources[k]);
    m.raw("]");
    first = false;
  }
  m.raw("\n },\n ");
  if (!plan.calibration.is_null()) m.key("calibration").raw(plan.calibration.dump()).raw(",\n ");
  if (!plan.rotation.is_null()) m.key("rotation").raw(plan.rotation.dump()).raw(",\n ");
  if (!plan.gptq_calibration.is_null()) m.key("gptq_calibration").raw(plan.gptq_calibration.dump()).raw(",\n ");
  m.key("in_place").raw(mode == RunMode::InPlace ? "true" : "false").raw(",\n ");
  m.key("recipe").raw("{").key("name").str(recipe.name).raw(", ").key("path").str(recipe.path).raw(", ");
  m.key("text").str(recipe.text).raw("},\n ").key("selq_version").str(SELQ_VERSION).raw(",\n ");
  m.key("source").str(plan.source).raw(",\n ").key("tensors").raw("[");
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = plan.tensors[i];
    const auto& r = records[i];
    m.raw(i ? ",\n  {" : "\n  {").key("format").str(format_of(t));
    if (r.metrics) m.raw(", ").key("metrics").raw("{").metrics(*r.metrics).raw("}");
    if (t.scheme) m.raw(", ").key("module").str(t.module);
    m.raw(", ").key("outputs").raw("[");
    for (std::size_t k = 0; k < t.outputs.size(); ++k) {
      const auto& o = t.outputs[k];
      m.raw(k ? ", {" : "{").key("dtype").str(dtype_name(o.info.dtype)).raw(", ").key("name").str(o.info.name);
      m.raw(", ").key("shape").shape(o.info.shape).raw(", ").key("shard").str(shard_of[o.info.name]).raw(", ");
      m.key("xxh3").str(k < r.output_hashes.size() ? hash_hex(r.output_hashes[k]) : "").raw("}");
    }
    m.raw("]");
    // Only a rounding other than nearest is recorded: nearest's manifest is byte for byte what it was.
    if (t.scheme && t.scheme->rounding.value != quant::Rounding::Nearest)
      m.raw(", ").key("rounding").str(quant::rounding_name(t.scheme->rounding.value));
    if (t.scheme) m.raw(", ").key("scheme").str(t.scheme->name());
    m.raw(", ").key("source").str(t.source).raw(", ").key("source_dtype").str(dtype_name(t.source_info.dtype));
    m.raw(", ").key("source_shape").shape(t.source_info.shape).raw(", ");
    m.key("source_xxh3").str(hash_hex(r.source_hash)).raw("}");
  }
  m.raw("\n ]\n}\n");
  return m.take();
}

std::string write_manifest_and_report(const Plan& plan, const recipe::Recipe& recipe,
                                      const std::vector<TensorRecord>& records, const std::string& dir,
                                      RunMode mode) {
  std::string manifest;
  tbb::parallel_invoke(
      [&] {
        manifest = manifest_json(plan, recipe, records, mode);
        io::write_file_atomic((fs::path(dir) / kManifestName).string(), manifest);
      },
      [&] { io::write_file_atomic((fs::path(dir) / kReportName).string(), format_plan(plan)); });
  return manifest;
}

std::string finalize_checkpoint(const io::Checkpoint& source, const Plan& plan, const recipe::Recipe& recipe,
                                const std::vector<TensorRecord>& records, const std::string& dir, RunMode mode) {
  std::string manifest;
  tbb::parallel_invoke([&] { manifest = write_manifest_and_report(plan, recipe, records, dir, mode); },
                       [&] { write_checkpoint_files(source, plan, dir, mode); });
  return manifest;
}

}  // namespace selq::pipeline
