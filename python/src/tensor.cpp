// quantize_tensor / dequantize: one tensor through the scheme kernels
// (quant/scheme.h), with the scheme parsed by the recipe parser and adapted
// to the dialect exactly as `selq quantize` plans it (pipeline/plan.cpp), so
// the bytes are those of the checkpoint it writes. Input arrays are read in
// place (no copy); outputs are numpy arrays owning the kernel's buffers.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <fmt/format.h>

#include "bindings.h"
#include "calibration/gptq.h"
#include "core/error.h"
#include "export/dialect.h"
#include "quant/gptq_grid.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace selq::python {
namespace {

using Bytes = nb::ndarray<nb::numpy, std::uint8_t, nb::ndim<1>>;
using InArray = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;

DType parse_dtype(const std::string& name) {
  auto d = dtype_from_name(name);
  if (!d) throw_bad_input(fmt::format("unknown dtype '{}'", name));
  return *d;
}

// The scheme of a one-rule recipe's default (`recipe_yaml`), adapted to the
// dialect for a model of `model_dtype`.
quant::SchemeSpec scheme_of(const std::string& recipe_yaml, const std::string& dialect, DType model_dtype) {
  const auto r = recipe::parse_recipe(recipe_yaml, "<scheme>");
  if (!r.default_scheme) throw_bad_input("no scheme given", {"<scheme>"});
  const auto d = exporter::parse_dialect(dialect);
  exporter::check_dialect_supports(d, *r.default_scheme);
  return exporter::adapt_scheme_for_dialect(d, *r.default_scheme, model_dtype);
}

std::span<const std::uint8_t> bytes_of(const InArray& a) {
  return {static_cast<const std::uint8_t*>(a.data()), a.nbytes()};
}

Bytes owned_bytes(std::vector<std::uint8_t>&& v) {
  auto* heap = new std::vector<std::uint8_t>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<std::uint8_t>*>(p); });
  return Bytes(heap->data(), {heap->size()}, owner);
}

std::string suffix(exporter::Dialect d, const quant::SchemeSpec& spec, quant::OutRole role) {
  return exporter::output_tensor_name(d, spec, role, "").substr(1);  // ".weight_scale" -> "weight_scale"
}

nb::tuple quantize_tensor(const InArray& data, const std::string& dtype, const Shape& shape,
                          const std::string& recipe_yaml, const std::string& dialect,
                          std::optional<float> global_amax, bool allow_non_finite,
                          const std::optional<std::vector<float>>& channel_weights,
                          const std::optional<InArray>& hessian) {
  const TensorInfo info{"tensor", parse_dtype(dtype), shape};
  if (!dtype_is_float_source(info.dtype)) throw_bad_input(fmt::format("cannot quantize a {} tensor", dtype));
  if (data.nbytes() != info.nbytes())
    throw_bad_input(fmt::format("array holds {} bytes, a {} {} tensor needs {}", data.nbytes(), dtype,
                                shape_to_string(shape), info.nbytes()));
  const auto spec = scheme_of(recipe_yaml, dialect, info.dtype);
  const auto d = exporter::parse_dialect(dialect);
  const auto outs = quant::scheme_outputs(spec, shape);
  std::vector<std::vector<std::uint8_t>> bufs;
  std::vector<std::span<std::uint8_t>> spans;
  for (const auto& o : outs) bufs.emplace_back(dtype_nbytes(o.dtype, shape_numel(o.shape)));
  for (auto& b : bufs) spans.emplace_back(b);
  quant::ErrorMetrics metrics;
  quant::TensorQuantizeOptions opt;
  opt.global_amax = global_amax;
  opt.reject_non_finite = !allow_non_finite;
  if (channel_weights) opt.channel_weights = *channel_weights;
  const bool gptq = spec.rounding.value == quant::Rounding::Gptq;
  if (gptq != hessian.has_value())
    throw_bad_input(gptq ? "rounding 'gptq' needs hessian= (the [in, in] float64 Σ x xᵀ of the layer's inputs)"
                         : "hessian= is used by rounding 'gptq' only");
  const TensorView view{&info, bytes_of(data)};
  {
    nb::gil_scoped_release nogil;
    if (gptq) {
      const auto in = shape.empty() ? 0 : shape.back();
      if (hessian->dtype() != nb::dtype<double>() || hessian->nbytes() != static_cast<std::size_t>(in * in * 8))
        throw_bad_input(fmt::format("hessian must be a float64 [{0}, {0}] array", in));
      const std::span<const double> h(static_cast<const double*>(hessian->data()), static_cast<std::size_t>(in * in));
      calibration::GptqOptions go;
      go.quantize.global_amax = global_amax;
      const calibration::GptqResult r = calibration::gptq_round(spec, view, h, go);
      const std::vector<float> diagonal = calibration::hessian_diagonal(h, in);
      opt.channel_weights = diagonal;  // the scale search GPTQ rounded onto
      const TensorInfo rinfo{"tensor", DType::F32, shape};
      const TensorView rounded{&rinfo, {reinterpret_cast<const std::uint8_t*>(r.weight.data()), r.weight.size() * 4}};
      quant::store_gptq_weights(spec, view, rounded, spans, metrics, opt);
    } else {
      quant::quantize_weight(spec, view, spans, metrics, opt);
    }
  }
  nb::list tensors;
  for (std::size_t i = 0; i < outs.size(); ++i)
    tensors.append(nb::make_tuple(suffix(d, spec, outs[i].role), std::string(dtype_name(outs[i].dtype)),
                                  outs[i].shape, owned_bytes(std::move(bufs[i]))));
  nb::dict m;
  m["rel_frobenius"] = metrics.rel_frobenius();
  m["snr_db"] = metrics.snr_db();
  m["cosine"] = metrics.cosine();
  m["max_abs_err"] = metrics.max_abs_err;
  m["elements"] = metrics.elements;
  m["clipped_elements"] = metrics.clipped_elements;
  m["blocks"] = metrics.blocks;
  m["clipped_blocks"] = metrics.clipped_blocks;
  return nb::make_tuple(tensors, m, spec.name());
}

nb::ndarray<nb::numpy, float> dequantize(const std::vector<InArray>& stored, const Shape& shape,
                                         const std::string& model_dtype, const std::string& recipe_yaml,
                                         const std::string& dialect) {
  const auto spec = scheme_of(recipe_yaml, dialect, parse_dtype(model_dtype));
  const auto outs = quant::scheme_outputs(spec, shape);
  // Static activation scales are not part of the weight.
  if (stored.size() != outs.size())
    throw_bad_input(fmt::format("scheme {} stores {} tensors, {} given", spec.name(), outs.size(), stored.size()));
  std::vector<std::span<const std::uint8_t>> spans;
  for (std::size_t i = 0; i < outs.size(); ++i) {
    const auto want = dtype_nbytes(outs[i].dtype, shape_numel(outs[i].shape));
    if (stored[i].nbytes() != want)
      throw_bad_input(fmt::format("stored tensor {} holds {} bytes, {} {} needs {}", i, stored[i].nbytes(),
                                  dtype_name(outs[i].dtype), shape_to_string(outs[i].shape), want));
    spans.push_back(bytes_of(stored[i]));
  }
  std::vector<float> dq;
  {
    nb::gil_scoped_release nogil;
    dq = quant::dequantize_weight(spec, shape, spans);
  }
  auto* heap = new std::vector<float>(std::move(dq));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return nb::ndarray<nb::numpy, float>(heap->data(), dims.size(), dims.data(), owner);
}

}  // namespace

void bind_tensor(nb::module_& m) {
  m.def("quantize_tensor", &quantize_tensor, "data"_a, "dtype"_a, "shape"_a, "recipe_yaml"_a, "dialect"_a,
        "global_amax"_a.none(), "allow_non_finite"_a, "channel_weights"_a.none(), "hessian"_a.none());
  m.def("dequantize", &dequantize, "stored"_a, "shape"_a, "model_dtype"_a, "recipe_yaml"_a, "dialect"_a);
  m.def(
      "scheme_outputs",
      [](const Shape& shape, const std::string& model_dtype, const std::string& recipe_yaml, const std::string& dialect) {
        const auto spec = scheme_of(recipe_yaml, dialect, parse_dtype(model_dtype));
        const auto d = exporter::parse_dialect(dialect);
        std::vector<std::tuple<std::string, std::string, Shape>> out;
        for (const auto& o : quant::scheme_outputs(spec, shape))
          out.emplace_back(suffix(d, spec, o.role), std::string(dtype_name(o.dtype)), o.shape);
        return out;
      },
      "shape"_a, "model_dtype"_a, "recipe_yaml"_a, "dialect"_a);
}

}  // namespace selq::python
