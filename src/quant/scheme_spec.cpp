// Scheme names, shape checks and the tensors each scheme emits, from the
// kind's row in scheme_traits.cpp.
#include <fmt/format.h>

#include "quant/detail.h"
#include "quant/scheme_traits.h"

namespace selq::quant {

std::string SchemeSpec::name() const { return scheme_traits(kind).label(*this); }

namespace detail {

int group_width(const SchemeSpec& spec, std::int64_t in) { return scheme_traits(spec.kind).group_width(spec, in); }

Geometry geometry_for(const SchemeSpec& spec, const Shape& shape, const std::string& tensor) {
  ErrorWhere where{{}, tensor, {}};
  if (shape.size() < 2)
    throw_unsupported(fmt::format("cannot quantize a {}-D tensor {} with {}: only 2-D linear "
                                  "weights [out, in] and 3-D expert stacks [experts, out, in] "
                                  "are quantized; exclude norms, biases and scalars in the recipe",
                                  shape.size(), shape_to_string(shape), spec.name()),
                      where);
  if (shape.size() > 3)
    throw_unsupported(fmt::format("cannot quantize {}-D tensor {} with {}: expected [out, in] "
                                  "or [experts, out, in]",
                                  shape.size(), shape_to_string(shape), spec.name()),
                      where);
  Geometry g;
  g.three_d = shape.size() == 3;
  g.experts = g.three_d ? shape[0] : 1;
  g.out = shape[shape.size() - 2];
  g.in = shape[shape.size() - 1];
  if (g.experts <= 0 || g.out <= 0 || g.in <= 0)
    throw_unsupported(fmt::format("cannot quantize empty tensor {} with {}",
                                  shape_to_string(shape), spec.name()),
                      where);
  const SchemeTraits& row = scheme_traits(spec.kind);
  if (row.param_problem != nullptr) {
    if (std::string problem = row.param_problem(spec); !problem.empty()) throw_unsupported(problem, where);
  }
  const char* why = row.in_multiple_why;
  if (why != nullptr) {
    const int gw = group_width(spec, g.in);
    if (g.in % gw != 0)
      throw_unsupported(fmt::format("cannot quantize {} with {}: in_features {} is not a "
                                    "multiple of {} ({})",
                                    shape_to_string(shape), spec.name(), g.in, gw, why),
                        where);
  }
  return g;
}

}  // namespace detail

std::vector<OutTensorSpec> scheme_outputs(const SchemeSpec& spec, const Shape& shape) {
  const detail::Geometry g = detail::geometry_for(spec, shape);
  const auto with_e = [&](Shape s) {
    if (g.three_d) s.insert(s.begin(), g.experts);
    return s;
  };
  std::vector<OutTensorSpec> v;
  scheme_traits(spec.kind).outputs(spec, g, v);
  for (auto& o : v)
    if (o.role != OutRole::WeightShape) o.shape = with_e(o.shape);  // the source's rank, not per expert
  return v;
}

std::optional<Shape> unquantized_weight_shape(const SchemeSpec& spec, DType stored_dtype, const Shape& stored_shape) {
  if (stored_shape.empty()) return std::nullopt;
  for (std::int64_t elements_per_stored : {1, 2, 4, 8}) {
    Shape cand = stored_shape;
    cand.back() *= elements_per_stored;
    try {
      for (const auto& o : scheme_outputs(spec, cand))
        if (o.role == OutRole::Weight && o.shape == stored_shape && o.dtype == stored_dtype) return cand;
    } catch (const Error&) {
      // this candidate is not a shape the scheme quantizes
    }
  }
  return std::nullopt;
}

}  // namespace selq::quant
