// Engine-style loading of linear layers and their forward pass.
#include "runtime/model/linear.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "core/error.h"
#include "core/machine.h"
#include "export/dialect.h"
#include "export/dialect_read.h"
#include "export/engine_resolve.h"
#include "export/native_fp8.h"
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"
#include "recipe/recipe.h"
#include "runtime/model/stored_weight.h"

namespace selq::runtime {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

void Linear::forward(const float* x, std::int64_t rows, float* y, bool rowwise) const {
  const float* a = x;
  std::vector<float> q;
  if (act != ActMode::None) {
    // Engines quantize each token's activation row on the fly; doing the same
    // QDQ in FP32 reproduces what the low-precision GEMM sees.
    q.assign(x, x + rows * in);
    tbb::parallel_for(std::int64_t{0}, rows, [&](std::int64_t t) {
      quant::qdq_activation_row(act, q.data() + t * in, static_cast<std::size_t>(in), act_static_scale, act_rule);
    });
    a = q.data();
  }
  (rowwise ? matmul_rowwise : matmul)(weight, a, rows, y);
  if (!bias.empty())
    for (std::int64_t t = 0; t < rows; ++t)
      for (std::int64_t o = 0; o < out; ++o) y[t * out + o] += bias[static_cast<std::size_t>(o)];
}

namespace {

float read_scalar(const TensorView& v) {
  if (shape_numel(v.info->shape) != 1)
    throw_bad_input(fmt::format("{} should hold one value, has shape {}", v.info->name,
                                shape_to_string(v.info->shape)));
  return load_float_element(v.info->dtype, v.bytes.data(), 0);
}

// An FP8 tensor- or channel-scaled weight as its two stored factors: E4M3
// values (exactly BF16: 3 mantissa bits, a smaller exponent range) and one F32
// scale per row. Their product is quant::dequantize_weight's value bit for bit
// (one F32 multiply), in half the bytes of F32. Other schemes: nullopt.
std::optional<Matrix> fp8_factors(const SchemeSpec& spec, std::span<const std::span<const std::uint8_t>> outs,
                                  std::int64_t rows, std::int64_t cols) {
  if (spec.kind != SchemeKind::FP8Channel && spec.kind != SchemeKind::FP8Tensor) return std::nullopt;
  const auto n = static_cast<std::size_t>(rows * cols);
  const std::size_t scales = spec.kind == SchemeKind::FP8Tensor ? 1 : static_cast<std::size_t>(rows);
  if (outs.size() != 2 || outs[0].size() != n ||
      outs[1].size() * 8 != scales * static_cast<std::size_t>(dtype_bits(spec.scale_dtype)))
    return std::nullopt;  // not the layout this factoring assumes: dequantize as any scheme
  std::vector<std::uint16_t> bits(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = e4m3_to_f32(outs[0][i]);
    std::uint32_t u;
    std::memcpy(&u, &v, 4);
    bits[i] = static_cast<std::uint16_t>(u >> 16);
  }
  std::vector<float> scale(static_cast<std::size_t>(rows));
  for (std::int64_t r = 0; r < rows; ++r)
    scale[static_cast<std::size_t>(r)] = load_float_element(
        spec.scale_dtype, outs[1].data(), spec.kind == SchemeKind::FP8Tensor ? 0 : static_cast<std::uint64_t>(r));
  return Matrix::from_bf16_scaled(std::move(bits), std::move(scale), rows, cols);
}

}  // namespace

Matrix load_matrix(const TensorView& v, std::int64_t rows, std::int64_t cols,
                   const std::shared_ptr<const void>& mapping) {
  const auto n = static_cast<std::size_t>(rows * cols);
  if (shape_numel(v.info->shape) != n)
    throw_bad_input(fmt::format("{} has {} elements, the model expects [{}, {}]", v.info->name,
                                shape_numel(v.info->shape), rows, cols));
  if (v.info->dtype == DType::BF16 && mapping && reinterpret_cast<std::uintptr_t>(v.bytes.data()) % 2 == 0)
    return Matrix::from_mapped_bf16(reinterpret_cast<const std::uint16_t*>(v.bytes.data()), rows, cols, mapping);
  if (v.info->dtype == DType::BF16) {
    std::vector<std::uint16_t> bits(n);
    std::memcpy(bits.data(), v.bytes.data(), 2 * n);
    return Matrix::from_bf16(std::move(bits), rows, cols);
  }
  std::vector<float> f(n);
  load_floats(v.info->dtype, v.bytes.data(), 0, n, f.data());
  return Matrix::from_f32(std::move(f), rows, cols);
}

namespace {

// Whether to hold quantized weights as stored: SELQ_RUNTIME_WEIGHTS=stored or
// =dequantized decides; otherwise only when dequantizing them all (at most 8x
// their stored bytes: a 4-bit value becomes an F32) would take more than half
// of the machine's memory, since dequantizing on every use costs time.
bool hold_stored(std::uint64_t quantized_bytes, const std::string& dir) {
  if (const char* e = std::getenv("SELQ_RUNTIME_WEIGHTS"); e && *e) {
    const std::string v = e;
    if (v == "stored") return true;
    if (v == "dequantized") return false;
    throw_bad_input(fmt::format("SELQ_RUNTIME_WEIGHTS is '{}': expected stored or dequantized", v), {dir});
  }
  const std::uint64_t ram = physical_memory_bytes();
  return ram > 0 && 8 * quantized_bytes > ram / 2;
}

}  // namespace

std::shared_ptr<const void> mapping_of(const std::shared_ptr<const io::Checkpoint>& ckpt) {
  if (!ckpt || ckpt->is_remote()) return nullptr;
  return ckpt;
}

SchemeSpec scheme_from_config_json(const std::string& dialect, const nlohmann::json& scheme_json) {
  auto d = exporter::dialect_from_name(dialect);
  if (!d) throw_unsupported(fmt::format("unknown quantization dialect '{}'", dialect));
  if (auto s = exporter::scheme_from_config_json_any_dtype(*d, scheme_json)) return *s;
  throw_unsupported(fmt::format("the runtime knows no scheme that the {} config {} describes", dialect,
                                scheme_json.dump()));
}

namespace {

// The scheme a config entry of this checkpoint's dialect describes, read as
// the writer wrote it: for the model dtype of the checkpoint's own tensors.
SchemeSpec scheme_for_config(exporter::Dialect d, const nlohmann::json& scheme_json, const io::Checkpoint& ck) {
  if (auto s = exporter::scheme_from_config_json(d, scheme_json, io::model_float_dtype(ck))) return *s;
  throw_unsupported(fmt::format("{}: the runtime knows no scheme that the {} config {} describes", ck.dir(),
                                exporter::dialect_name(d), scheme_json.dump()));
}

}  // namespace

namespace {

// A quantized module: its scheme (as the engine resolves it, with the scale
// dtype the file holds) and where each of its tensors is.
struct StoredModule {
  std::string module;
  SchemeSpec spec;
  std::optional<exporter::Dialect> dialect;  // none: native block FP8

  std::string tensor(quant::OutRole role) const {
    return dialect ? exporter::output_tensor_name(*dialect, spec, role, module)
                   : exporter::native_fp8_tensor(module, role);
  }
};

void load_bias(const io::Checkpoint& ck, const std::string& module, Linear& l) {
  if (const auto* b = ck.find(module + ".bias")) {
    auto v = ck.view(module + ".bias");
    l.bias.resize(shape_numel(b->info.shape));
    load_floats(v.info->dtype, v.bytes.data(), 0, l.bias.size(), l.bias.data());
  }
}

// The stored tensors of m for an unpacked weight of `shape`, checked against
// what its scheme stores.
std::vector<std::span<const std::uint8_t>> stored_tensors(const io::Checkpoint& ck, const StoredModule& m,
                                                          const Shape& shape) {
  std::vector<std::span<const std::uint8_t>> outs;
  for (const auto& o : quant::scheme_outputs(m.spec, shape)) {
    const std::string name = m.tensor(o.role);
    const auto* t = ck.find(name);
    if (!t) throw_bad_input(fmt::format("{}: tensor {} missing for scheme {}", ck.dir(), name, m.spec.name()));
    if (t->info.dtype != o.dtype || shape_numel(t->info.shape) != shape_numel(o.shape))
      throw_bad_input(fmt::format("{}: {} is {} {}, scheme {} expects {} {}", ck.dir(), name,
                                  dtype_name(t->info.dtype), shape_to_string(t->info.shape), m.spec.name(),
                                  dtype_name(o.dtype), shape_to_string(o.shape)));
    outs.push_back(ck.view(name).bytes);
  }
  return outs;
}

// The unpacked 2-D weight shape m stores.
Shape stored_weight_shape(const io::Checkpoint& ck, const StoredModule& m) {
  const auto* wt = ck.find(m.tensor(quant::OutRole::Weight));
  if (!wt)
    throw_bad_input(fmt::format("{}: tensor {} missing for scheme {}", ck.dir(), m.tensor(quant::OutRole::Weight),
                                m.spec.name()));
  const auto unpacked = quant::unquantized_weight_shape(m.spec, wt->info.dtype, wt->info.shape);
  if (!unpacked || unpacked->size() != 2)
    throw_bad_input(fmt::format("{}: {} is {} {}, which scheme {} does not store for a 2-D weight", ck.dir(),
                                wt->info.name, dtype_name(wt->info.dtype), shape_to_string(wt->info.shape),
                                m.spec.name()));
  return *unpacked;
}

}  // namespace

struct LinearLoader::Impl {
  // The module's stored scheme, or nullopt when its weight is float.
  std::optional<StoredModule> stored_module(const std::string& module) {
    std::optional<StoredModule> m;
    if (native_fp8) {
      const auto* w = ckpt->find(module + ".weight");
      if (w && w->info.dtype == DType::F8_E4M3) m = StoredModule{module, native_fp8->scheme, std::nullopt};
    } else if (resolver) {
      if (auto resolved = resolver->resolve(module)) {
        auto key = resolved->dump();
        auto it = by_json.find(key);
        const SchemeSpec spec = it != by_json.end() ? it->second : scheme_for_config(*dialect, *resolved, *ckpt);
        by_json.emplace(key, spec);
        m = StoredModule{module, spec, dialect};
      }
    }
    // Scale dtype and rank are whatever the file holds (the config does not
    // say), for the kinds whose scale dtype is an option.
    if (m && (quant::scheme_traits(m->spec.kind).options & quant::kOptScaleDtype))
      if (const auto* sc = ckpt->find(m->tensor(quant::OutRole::Scale))) {
        m->spec.scale_dtype = sc->info.dtype;
        m->spec.scale_keepdim = sc->info.shape.size() == 2;
      }
    return m;
  }

  const io::Checkpoint* ckpt{nullptr};
  std::optional<exporter::Dialect> dialect;
  std::optional<exporter::NativeFp8> native_fp8;  // DeepSeek/Kimi block FP8 (not one of selq's dialects)
  std::unique_ptr<exporter::EngineResolver> resolver;
  std::map<std::string, SchemeSpec> by_json;  // memo of scheme_from_config_json
  std::map<std::string, std::uint64_t> module_bytes;  // stored bytes each module owns
  std::shared_ptr<const void> mapping;                 // keeps ckpt's mapping open (load_matrix)
  bool hold_stored{false};                             // quantized weights as stored (StoredWeight)
};

LinearLoader::LinearLoader(const io::Checkpoint& ckpt, std::vector<std::string> modules,
                           std::shared_ptr<const void> mapping)
    : impl_(std::make_unique<Impl>()) {
  impl_->ckpt = &ckpt;
  impl_->mapping = std::move(mapping);
  for (const auto& t : ckpt.tensors()) impl_->module_bytes[recipe::owning_module(t.info.name)] += t.info.nbytes();
  const auto& cfg = ckpt.config();
  if (cfg.is_object() && cfg.contains("quantization_config") && !cfg["quantization_config"].is_null()) {
    const auto& qc = cfg["quantization_config"];
    impl_->dialect = exporter::dialect_of_config(qc);
    impl_->native_fp8 = exporter::native_fp8_config(qc, ckpt.dir() + "/config.json");
    if (impl_->native_fp8) {
      dialect_ = "fp8";
      return;
    }
    if (!impl_->dialect)
      throw_unsupported(fmt::format("{}/config.json: quantization_config.quant_method '{}' is not one the runtime "
                                    "reads ({})",
                                    ckpt.dir(), qc.is_object() ? qc.value("quant_method", "") : "",
                                    exporter::readable_quant_methods_text()));
    dialect_ = exporter::dialect_name(*impl_->dialect);
    if (const auto what = exporter::unimplemented_numerics(*impl_->dialect, qc); !what.empty())
      throw_unsupported(fmt::format("{}/config.json: quantization_config.{}, which the runtime does not implement "
                                    "(its results would not be the engine's)",
                                    ckpt.dir(), what.front()));
    impl_->resolver = std::make_unique<exporter::EngineResolver>(exporter::vllm_engine_for(*impl_->dialect), qc,
                                                                 std::move(modules));
  }
  if (impl_->mapping && (impl_->resolver || impl_->native_fp8)) {
    std::set<std::string> quantized_modules;  // every module with a non-float tensor
    for (const auto& t : ckpt.tensors())
      if (!dtype_is_float_source(t.info.dtype)) quantized_modules.insert(recipe::owning_module(t.info.name));
    std::uint64_t quantized = 0;
    for (const auto& m : quantized_modules) quantized += impl_->module_bytes[m];
    impl_->hold_stored = hold_stored(quantized, ckpt.dir());
  }
}

bool LinearLoader::holds_stored() const { return impl_->hold_stored; }

LinearLoader::~LinearLoader() = default;

double LinearLoader::stored_bits(const std::string& module) const {
  auto it = impl_->module_bytes.find(module);
  return it == impl_->module_bytes.end() ? 0.0 : 8.0 * static_cast<double>(it->second);
}

Linear LinearLoader::load(const std::string& module) const {
  const io::Checkpoint& ck = *impl_->ckpt;
  Linear l;
  l.module = module;
  l.stored_bits = stored_bits(module);
  load_bias(ck, module, l);
  const std::optional<StoredModule> stored = impl_->stored_module(module);
  if (!stored) {
    auto v = ck.view(module + ".weight");
    const Shape& s = v.info->shape;
    if (s.size() != 2)
      throw_bad_input(fmt::format("{}.weight: expected a 2-D float weight, got {} {}", module,
                                  dtype_name(v.info->dtype), shape_to_string(s)));
    l.out = s[0];
    l.in = s[1];
    l.weight = load_matrix(v, l.out, l.in, impl_->mapping);
    l.scheme = dtype_name(v.info->dtype);
    return l;
  }
  const SchemeSpec& spec = stored->spec;
  const Shape shape = stored_weight_shape(ck, *stored);
  const auto outs = stored_tensors(ck, *stored, shape);
  l.out = shape[0];
  l.in = shape[1];
  std::shared_ptr<const StoredWeight> kept;
  if (auto fp8 = fp8_factors(spec, outs, l.out, l.in))
    l.weight = std::move(*fp8);
  else if (impl_->hold_stored && (kept = StoredWeight::make(spec, shape, outs, impl_->mapping)))
    l.weight = Matrix::from_stored(std::move(kept));
  else
    l.weight = Matrix::from_f32(quant::dequantize_weight(spec, shape, outs), l.out, l.in);
  l.act = spec.act;
  l.act_rule = spec.scale_rule;
  l.scheme = spec.name();
  if (quant::act_mode_traits(spec.act).is_static()) {
    const std::string name = stored->tensor(quant::OutRole::InputScale);
    if (!ck.find(name))
      throw_bad_input(fmt::format("{}: static {} activations of {} need {}; quantize again with a calibration",
                                  ck.dir(), quant::act_mode_name(spec.act), module, name),
                      {}, ErrorHint::CalibrationFile);
    l.act_static_scale = quant::static_scale_from_stored(spec, read_scalar(ck.view(name)));
  }
  return l;
}

}  // namespace selq::runtime
