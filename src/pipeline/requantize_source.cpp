#include "pipeline/requantize_source.h"

#include <optional>

#include <fmt/format.h>

#include "core/error.h"
#include "export/dialect.h"
#include "export/dialect_read.h"
#include "export/engine_resolve.h"
#include "export/native_fp8.h"

namespace selq::pipeline {

struct StoredWeightFinder::Impl {
  const io::Checkpoint& ckpt;
  std::vector<std::string> modules;
  DType model_dtype;
  nlohmann::json qc;
  std::string method;
  std::optional<exporter::Dialect> dialect;          // of qc, when it is one of selq's three
  std::optional<exporter::NativeFp8> native_fp8;     // DeepSeek/Kimi block FP8
  std::unique_ptr<exporter::EngineResolver> resolver;  // built on first use

  // The stored tensors `spec` needs for `module`, named by `name_of`, given
  // the stored weight tensor: the logical shape is the one whose scheme
  // outputs match what is stored (packed FP4 and int32 words hide it).
  template <class NameOf>
  StoredWeight match(const std::string& module, const quant::SchemeSpec& spec, NameOf name_of) {
    const std::string wname = name_of(quant::OutRole::Weight);
    const auto* w = ckpt.find(wname);
    if (!w) throw_bad_input(fmt::format("stored as {} but '{}' is missing", spec.name(), wname), {ckpt.dir(), module});
    if (auto shape = quant::unquantized_weight_shape(spec, w->info.dtype, w->info.shape)) {
      StoredWeight sw{spec, *shape, {}, 0};
      bool ok = true;
      for (const auto& o : quant::scheme_outputs(spec, *shape)) {
        const std::string n = name_of(o.role);
        const auto* t = ckpt.find(n);
        if (!t || t->info.dtype != o.dtype || t->info.shape != o.shape) {
          ok = false;
          break;
        }
        sw.tensors.push_back(n);
        sw.bytes += t->info.nbytes();
      }
      if (ok) return sw;
    }
    throw_unsupported(fmt::format("the stored tensors do not match {} (weight {} {})", spec.name(),
                                  dtype_name(w->info.dtype), shape_to_string(w->info.shape)),
                      {ckpt.dir(), module});
  }
};

StoredWeightFinder::StoredWeightFinder(const io::Checkpoint& ckpt, std::vector<std::string> modules,
                                       DType model_dtype)
    : impl_(new Impl{ckpt, std::move(modules), model_dtype, {}, {}, {}, {}, {}}) {
  const auto& cfg = ckpt.config();
  if (cfg.is_object() && cfg.contains("quantization_config") && cfg["quantization_config"].is_object())
    impl_->qc = cfg["quantization_config"];
  else
    impl_->qc = exporter::side_file_config(ckpt.dir());
  if (impl_->qc.is_object()) {
    impl_->method = impl_->qc.value("quant_method", "");
    impl_->dialect = exporter::dialect_of_config(impl_->qc);
    impl_->native_fp8 = exporter::native_fp8_config(impl_->qc, ckpt.dir() + "/config.json");
  }
}

StoredWeightFinder::~StoredWeightFinder() = default;

StoredWeight StoredWeightFinder::find(const std::string& module) {
  Impl& m = *impl_;
  if (m.native_fp8)
    return m.match(module, m.native_fp8->scheme,
                   [&](quant::OutRole r) { return exporter::native_fp8_tensor(module, r); });
  if (m.dialect) {
    const exporter::Dialect d = *m.dialect;
    const std::string name = exporter::dialect_name(d);
    if (!m.resolver) m.resolver = std::make_unique<exporter::EngineResolver>(exporter::vllm_engine_for(d), m.qc, m.modules);
    const auto& scheme_json = m.resolver->resolve(module);
    if (!scheme_json)
      throw_bad_input(fmt::format("has quantized tensors but its {} config resolves it to float", name),
                      {m.ckpt.dir(), module});
    auto spec = exporter::scheme_from_config_json(d, *scheme_json, m.model_dtype);
    if (!spec)
      throw_unsupported(fmt::format("cannot dequantize: selq does not know the {} scheme {}", name, scheme_json->dump()),
                        {m.ckpt.dir(), module});
    return m.match(module, *spec, [&](quant::OutRole r) { return exporter::output_tensor_name(d, *spec, r, module); });
  }
  throw_unsupported(fmt::format("cannot dequantize a '{}' source for requantize; these are supported: {}",
                                m.method.empty() ? "unknown" : m.method, exporter::readable_quant_methods_text()),
                    {m.ckpt.dir(), module});
}

}  // namespace selq::pipeline
