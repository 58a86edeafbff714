// Scheme names and the shapes/dtypes of the tensors each scheme emits.
#include <fmt/format.h>

#include "quant/detail.h"

namespace selq::quant {

namespace {
const char* rule_suffix(ScaleRule r) {
  switch (r) {
    case ScaleRule::Floor: return "-floor";
    case ScaleRule::Ceil: return "-ceil";
    case ScaleRule::RCeil: return "-rceil";
    case ScaleRule::Even: return "";
  }
  return "";
}
}  // namespace

std::string SchemeSpec::name() const {
  switch (kind) {
    case SchemeKind::MXFP4: return std::string("mxfp4") + rule_suffix(scale_rule);
    case SchemeKind::MXFP8: return std::string("mxfp8") + rule_suffix(scale_rule);
    case SchemeKind::NVFP4:
      return nvfp == NvfpConvention::ModelOpt ? "nvfp4-modelopt" : "nvfp4";
    case SchemeKind::FP8Tensor: return "fp8-tensor";
    case SchemeKind::FP8Channel: return "fp8-channel";
    case SchemeKind::FP8Block:
      if (block_rows == block_cols) return fmt::format("fp8-block{}", block_rows);
      return fmt::format("fp8-block{}x{}", block_rows, block_cols);
    case SchemeKind::IntChannel:
      return fmt::format("int{}-channel{}", bits, symmetric ? "" : "-asym");
    case SchemeKind::IntGroup:
      return fmt::format("int{}-g{}{}", bits, group_size, symmetric ? "" : "-asym");
  }
  return "unknown";
}

namespace detail {

int group_width(const SchemeSpec& spec, std::int64_t in) {
  switch (spec.kind) {
    case SchemeKind::MXFP4:
    case SchemeKind::MXFP8: return 32;
    case SchemeKind::NVFP4: return 16;
    case SchemeKind::IntGroup: return spec.group_size;
    case SchemeKind::FP8Block: return spec.block_cols;
    default: return static_cast<int>(in);
  }
}

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
  if ((spec.kind == SchemeKind::IntChannel || spec.kind == SchemeKind::IntGroup) &&
      spec.bits != 4 && spec.bits != 8)
    throw_unsupported(fmt::format("int schemes support 4 or 8 bits, not {}", spec.bits), where);
  if (spec.kind == SchemeKind::IntGroup && spec.group_size <= 0)
    throw_unsupported(fmt::format("{}: group_size must be positive", spec.name()), where);
  if (spec.kind == SchemeKind::FP8Block && (spec.block_rows <= 0 || spec.block_cols <= 0))
    throw_unsupported("fp8 block scheme needs positive block_rows/block_cols", where);
  const char* why = nullptr;
  switch (spec.kind) {
    case SchemeKind::MXFP4:
    case SchemeKind::MXFP8:
      why = "OCP MX blocks are 32 input channels; compressed-tensors mxfp4/mxfp8 and Quark "
            "OCP_MX both require in_features % 32 == 0 (they do not pad)";
      break;
    case SchemeKind::NVFP4:
      why = "NVFP4 blocks are 16 input channels; compressed-tensors nvfp4-pack-quantized "
            "requires in_features % 16 == 0 (ModelOpt pads, but vLLM/TRT-LLM kernels expect "
            "unpadded multiples of 16)";
      break;
    case SchemeKind::IntGroup:
      why = "compressed-tensors group strategy requires in_features % group_size == 0";
      break;
    default: break;
  }
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
  const std::int64_t out = g.out, in = g.in;
  std::vector<OutTensorSpec> v;
  switch (spec.kind) {
    case SchemeKind::MXFP4:
      v.push_back({OutRole::Weight, DType::U8, with_e({out, in / 2})});
      v.push_back({OutRole::Scale, DType::U8, with_e({out, in / 32})});
      break;
    case SchemeKind::MXFP8:
      v.push_back({OutRole::Weight, DType::F8_E4M3, with_e({out, in})});
      v.push_back({OutRole::Scale, DType::U8, with_e({out, in / 32})});
      break;
    case SchemeKind::NVFP4:
      v.push_back({OutRole::Weight, DType::U8, with_e({out, in / 2})});
      v.push_back({OutRole::Scale, DType::F8_E4M3, with_e({out, in / 16})});
      v.push_back({OutRole::GlobalScale, DType::F32,
                   spec.nvfp == NvfpConvention::ModelOpt ? with_e({}) : with_e({1})});
      break;
    case SchemeKind::FP8Tensor:
      v.push_back({OutRole::Weight, DType::F8_E4M3, with_e({out, in})});
      v.push_back({OutRole::Scale, spec.scale_dtype, spec.scale_keepdim ? with_e({1}) : with_e({})});
      break;
    case SchemeKind::FP8Channel:
      v.push_back({OutRole::Weight, DType::F8_E4M3, with_e({out, in})});
      v.push_back({OutRole::Scale, spec.scale_dtype,
                   spec.scale_keepdim ? with_e({out, 1}) : with_e({out})});
      break;
    case SchemeKind::FP8Block:
      v.push_back({OutRole::Weight, DType::F8_E4M3, with_e({out, in})});
      v.push_back({OutRole::Scale, spec.scale_dtype,
                   with_e({detail::ceil_div(out, spec.block_rows),
                           detail::ceil_div(in, spec.block_cols)})});
      break;
    case SchemeKind::IntChannel:
    case SchemeKind::IntGroup: {
      const bool channel = spec.kind == SchemeKind::IntChannel;
      const std::int64_t groups = channel ? 1 : in / spec.group_size;
      const Shape sshape = (channel && !spec.scale_keepdim) ? Shape{out} : Shape{out, groups};
      if (spec.int_pack_int32)
        v.push_back({OutRole::Weight, DType::I32, with_e({out, detail::ceil_div(in * spec.bits, 32)})});
      else
        v.push_back({OutRole::Weight, DType::I8, with_e({out, in})});
      v.push_back({OutRole::Scale, spec.scale_dtype, with_e(sshape)});
      if (!spec.symmetric) {
        if (spec.int_pack_int32)  // packed along the output dim (pack_to_int32 packed_dim=0)
          v.push_back({OutRole::ZeroPoint, DType::I32,
                       with_e({detail::ceil_div(out * spec.bits, 32), groups})});
        else
          v.push_back({OutRole::ZeroPoint, DType::I8, with_e(sshape)});
      }
      if (spec.int_pack_int32)
        v.push_back({OutRole::WeightShape, DType::I64, Shape{g.three_d ? 3 : 2}});
      break;
    }
  }
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
