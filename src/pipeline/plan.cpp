#include "pipeline/plan.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>

#include "core/error.h"
#include "export/dialect.h"
#include "export/dialect_read.h"
#include "export/module_names.h"
#include "io/rotation_record.h"
#include "pipeline/calibration.h"
#include "quant/rounding_traits.h"
#include "quant/scheme_traits.h"
#include "recipe/fused_modules.h"

namespace selq::pipeline {

namespace {

bool is_weight_tensor_of_module(const std::string& tensor) {
  return tensor.ends_with(".weight") || tensor.ends_with(".weight_packed");
}

std::vector<PlannedShard> layout_source_shards(const io::Checkpoint& ckpt,
                                               const std::vector<PlannedTensor>& tensors) {
  std::map<std::string, std::size_t> shard_pos;
  std::vector<PlannedShard> shards;
  for (const auto& s : ckpt.shards()) {
    shard_pos[s] = shards.size();
    shards.push_back({s, {}});
  }
  for (std::size_t i = 0; i < tensors.size(); ++i)
    shards[shard_pos.at(tensors[i].source_shard)].tensors.push_back(i);
  return shards;
}

std::vector<PlannedShard> layout_capped_shards(const std::vector<PlannedTensor>& tensors,
                                               std::uint64_t cap) {
  std::vector<PlannedShard> shards;
  std::uint64_t current = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const std::uint64_t b = tensors[i].out_bytes();
    if (shards.empty() || (current > 0 && current + b > cap)) {
      shards.push_back({"", {}});
      current = 0;
    }
    shards.back().tensors.push_back(i);
    current += b;
  }
  for (std::size_t k = 0; k < shards.size(); ++k)
    shards[k].name = fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, shards.size());
  return shards;
}

// The static activation scale tensor of a scheme that needs one, after
// checking that the calibration has a usable amax for the module.
std::optional<quant::OutTensorSpec> static_activation_output(const quant::SchemeSpec& spec, const Shape& shape,
                                                             const std::string& module, const PlanOptions& options,
                                                             const std::string& recipe_path,
                                                             const std::string& tensor) {
  std::optional<quant::OutTensorSpec> out;
  try {
    out = quant::activation_scale_output(spec, shape);
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), {recipe_path, tensor}, e.hint());
  }
  if (!out) return out;
  if (options.calibration_path.empty())
    throw_bad_input(fmt::format("{} quantizes activations with a static scale, which needs a calibration",
                                recipe::describe_scheme(spec)),
                    {recipe_path, tensor}, ErrorHint::CalibrationFile);
  auto it = options.activation_amax.find(module);
  if (it == options.activation_amax.end())
    throw_bad_input(fmt::format("no activation amax for module '{}' ({} needs a static input scale)", module,
                                recipe::describe_scheme(spec)),
                    {options.calibration_path, tensor});
  if (!(it->second > 0.0f) || !std::isfinite(it->second))
    throw_bad_input(fmt::format("activation amax {} of module '{}' is not positive and finite", it->second, module),
                    {options.calibration_path, tensor});
  return out;
}

// A module that arrives quantized keeps its bytes, so the target dialect must
// describe them exactly as stored: the scheme, its conventions (scale dtype,
// NVFP4 global-scale convention) and every tensor name. Otherwise its config
// would make an engine misread them; refused here, before anything is written.
quant::SchemeSpec preexisting_scheme(exporter::Dialect d, const StoredWeight& stored, const std::string& module,
                                     DType model_dtype, const std::string& source) {
  const quant::SchemeSpec& s = stored.scheme;
  const std::string why = fmt::format("is stored as {} in the source and passes through unchanged, but the {} "
                                      "dialect",
                                      s.name(), exporter::dialect_name(d));
  try {
    exporter::check_dialect_supports(d, s);
  } catch (const Error& e) {
    throw_unsupported(fmt::format("{} cannot express it ({}); use the source's dialect or `requantize: true`", why,
                                  e.message()),
                      {source, module});
  }
  if (!(exporter::adapt_scheme_for_dialect(d, s, model_dtype) == s))
    throw_unsupported(fmt::format("{} stores {} with other conventions; use the source's dialect or "
                                  "`requantize: true`",
                                  why, s.name()),
                      {source, module});
  const auto outs = quant::scheme_outputs(s, stored.shape);
  for (std::size_t k = 0; k < outs.size() && k < stored.tensors.size(); ++k) {
    const std::string want = exporter::output_tensor_name(d, s, outs[k].role, module);
    if (want != stored.tensors[k])
      throw_unsupported(fmt::format("{} names its tensor '{}' where the source has '{}' (a pass-through does not "
                                    "rename tensors); use the source's dialect or `requantize: true`",
                                    why, want, stored.tensors[k]),
                        {source, module});
  }
  return s;
}

}  // namespace

std::uint64_t PlannedTensor::out_bytes() const {
  std::uint64_t b = 0;
  for (const auto& o : outputs) b += o.info.nbytes();
  return b;
}

std::uint64_t Plan::source_bytes() const {
  std::uint64_t b = 0;
  for (const auto& t : tensors) b += t.in_bytes();
  return b;
}

std::uint64_t Plan::largest_output_shard_bytes() const {
  std::uint64_t largest = 0;
  for (const auto& s : shards) {
    std::uint64_t b = 0;
    for (auto i : s.tensors) b += tensors[i].out_bytes();
    largest = std::max(largest, b);
  }
  return largest;
}

std::uint64_t Plan::output_bytes() const {
  std::uint64_t b = 0;
  for (const auto& t : tensors) b += t.out_bytes();
  return b;
}

bool Plan::needs_model_pass() const {
  for (const auto& t : tensors)
    if (t.scheme && quant::rounding_input(t.scheme->rounding.value) == quant::RoundingInput::ModelPass) return true;
  return false;
}

double Plan::bits_per_weight() const {
  const auto [bytes, elements] = linear_totals();
  return elements > 0 ? 8.0 * static_cast<double>(bytes) / static_cast<double>(elements) : 0.0;
}

Plan::LinearTotals Plan::linear_totals() const {
  std::set<std::string> linear;
  for (const auto& m : linear_modules) linear.insert(m.module);
  LinearTotals totals;
  for (const auto& t : tensors) {
    if (!linear.count(recipe::owning_module(t.source))) continue;
    totals.bytes += t.out_bytes();
    if (is_weight_tensor_of_module(t.source)) {
      // Count logical weight elements: a packed FP4 source stores 2 per byte.
      std::uint64_t n = shape_numel(t.source_info.shape);
      if (t.source.ends_with(".weight_packed") && t.source_info.dtype == DType::U8) n *= 2;
      totals.elements += n;
    }
  }
  return totals;
}

namespace {

// GPTQ rounds a 2-D linear weight of the source's float values (calibration/gptq_pass.h).
void check_gptq_tensor(const quant::SchemeSpec& spec, const PlannedTensor& pt, const Shape& shape,
                       const std::string& recipe_path) {
  try {
    quant::check_rounding_supported(spec, pt.source);
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), {recipe_path, pt.source}, e.hint());
  }
  if (pt.stored)
    throw_unsupported("rounding 'gptq' of an already-quantized module is not implemented (GPTQ runs on the "
                      "source's float weights); give its rule `rounding: mse`",
                      {recipe_path, pt.source});
  if (shape.size() != 2)
    throw_unsupported(fmt::format("rounding 'gptq' of a {}-D expert stack is not implemented; give its rule "
                                  "`rounding: mse`",
                                  shape.size()),
                      {recipe_path, pt.source});
}

// The recipe's dialect: checked even when --dialect overrides it (a typo in
// a recipe is refused whatever the command line says).
exporter::Dialect plan_dialect(const recipe::Recipe& recipe, const PlanOptions& options) {
  exporter::Dialect d = exporter::Dialect::CompressedTensors;
  try {
    if (!recipe.dialect.empty()) d = exporter::parse_dialect(recipe.dialect);
  } catch (const Error& e) {  // the same message, at the recipe's line
    const auto& at = recipe.dialect_where.file.empty() ? recipe::SourceLocation{recipe.path} : recipe.dialect_where;
    throw_bad_input(e.message(), ErrorWhere(recipe::where_text(at)));
  }
  return options.dialect ? *options.dialect : d;
}

// The source's quantization_config; refuses one whose quantized tensors selq cannot read.
const nlohmann::json& readable_source_config(const io::Checkpoint& ckpt) {
  static const nlohmann::json none;
  const nlohmann::json& qc = ckpt.config().is_object() && ckpt.config().contains("quantization_config")
                                 ? ckpt.config()["quantization_config"]
                                 : none;
  if (auto method = exporter::unread_quant_method(qc))
    throw_unsupported(fmt::format("the source's quantization_config (quant_method '{}') is not one selq reads "
                                  "({}); its quantized tensors cannot pass through or be re-quantized",
                                  *method, exporter::readable_quant_methods_text()),
                      {ckpt.dir() + "/config.json"});
  return qc;
}

// make_plan's steps over the resolver's decisions, one tensor at a time.
class PlanBuilder {
 public:
  PlanBuilder(const io::Checkpoint& ckpt, const recipe::Recipe& recipe, const PlanOptions& options, Plan& plan)
      : ckpt_(ckpt), recipe_(recipe), options_(options), plan_(plan), model_dtype_(io::model_float_dtype(ckpt)) {
    // compressed-tensors keeps a compressed-tensors source's own config groups
    // for what passes through (export/dialect_ct.cpp); every other pairing
    // describes pre-quantized modules by their stored scheme.
    const nlohmann::json& source_qc = readable_source_config(ckpt);
    keeps_source_groups_ =
        plan.dialect == exporter::Dialect::CompressedTensors && exporter::keeps_source_ct_groups(source_qc);
  }

  void add(std::size_t i, const recipe::TensorDecision& d, TensorInfo info) {
    PlannedTensor pt;
    pt.source = info.name;
    pt.source_shard = ckpt_.tensors()[i].shard;
    pt.source_info = std::move(info);
    pt.action = d.action;
    pt.module = recipe::owning_module(pt.source);
    // A re-quantized module's scales are read with its weight, not written.
    if (d.action == recipe::Action::Consumed) return;
    if (d.action == recipe::Action::Requantize) pt.stored = find_stored(pt.module);
    if (d.action == recipe::Action::Quantize || d.action == recipe::Action::Requantize)
      plan_quantized(pt, d);
    else
      pt.outputs.push_back({pt.source_info, std::nullopt});
    add_linear_module(pt, d);
    plan_.tensors.push_back(std::move(pt));
  }

 private:
  // The scheme as the dialect writes it, its output tensors and what its rounding needs.
  void plan_quantized(PlannedTensor& pt, const recipe::TensorDecision& d) {
    if (!d.scheme) throw Error(ErrorKind::Internal, "quantize decision without a scheme", {"", pt.source});
    const Shape& shape = pt.stored ? pt.stored->shape : pt.source_info.shape;
    if (!pt.stored && !dtype_is_float_source(pt.source_info.dtype))
      throw_bad_input(fmt::format("cannot quantize a {} tensor (only F32/F16/BF16 sources)",
                                  dtype_name(pt.source_info.dtype)),
                      {recipe_.path, pt.source});
    exporter::check_dialect_supports(plan_.dialect, *d.scheme);
    quant::SchemeSpec spec = exporter::adapt_scheme_for_dialect(plan_.dialect, *d.scheme, model_dtype_);
    std::vector<quant::OutTensorSpec> outs;
    try {
      outs = quant::scheme_outputs(spec, shape);
    } catch (const Error& e) {
      throw Error(e.kind(), e.message(), {recipe_.path, pt.source}, e.hint());
    }
    for (const auto& o : outs)
      pt.outputs.push_back(
          {{exporter::output_tensor_name(plan_.dialect, spec, o.role, pt.module), o.dtype, o.shape}, o.role});
    if (auto act = static_activation_output(spec, shape, pt.module, options_, recipe_.path, pt.source)) {
      pt.outputs.push_back(
          {{exporter::output_tensor_name(plan_.dialect, spec, act->role, pt.module), act->dtype, act->shape},
           act->role});
      pt.input_amax = options_.activation_amax.at(pt.module);
    }
    // No rounding does better than keeping every value (error 0 against the source).
    pt.exact_from_mxfp4 = pt.stored && pt.stored->scheme.kind == quant::SchemeKind::MXFP4 &&
                          spec.kind == quant::SchemeKind::NVFP4;
    const quant::RoundingInput needs = quant::rounding_input(spec.rounding.value);
    if (needs == quant::RoundingInput::InputMoments && spec.kind != quant::SchemeKind::FP8Tensor)
      pt.channel_weights = channel_weights(pt.module, shape, pt.source);
    if (needs == quant::RoundingInput::ModelPass) check_gptq_tensor(spec, pt, shape, recipe_.path);
    if (quant::scheme_traits(spec.kind).fused_group_amax && shape.size() == 2)
      pt.fused_group = recipe::fused_shard_key(pt.module);
    pt.scheme = spec;
  }

  // Linear modules for the config writer: every eligible weight and every
  // module that arrived already quantized.
  void add_linear_module(const PlannedTensor& pt, const recipe::TensorDecision& d) {
    const bool preexisting = d.action == recipe::Action::PassThrough && is_weight_tensor_of_module(pt.source);
    if (!(d.eligible || d.action == recipe::Action::Quantize || d.action == recipe::Action::Requantize ||
          preexisting) ||
        !linear_modules_.insert(pt.module).second)
      return;
    exporter::ModuleDecision md;
    md.module = pt.module;
    md.scheme = pt.scheme;
    md.preexisting = preexisting;
    // Whether the dialect can describe it as stored matters only to a plan that writes a config.
    if (preexisting && !keeps_source_groups_)
      md.scheme = options_.build_config
                      ? preexisting_scheme(plan_.dialect, find_stored(pt.module), pt.module, model_dtype_, ckpt_.dir())
                      : find_stored(pt.module).scheme;
    plan_.linear_modules.push_back(md);
  }

  // Rounding `weighted`'s per-input-channel weights of `module`, from the calibration's moments file.
  std::shared_ptr<const std::vector<float>> channel_weights(const std::string& module, const Shape& shape,
                                                            const std::string& tensor) {
    if (shape.size() != 2)
      throw_bad_input(fmt::format("rounding 'weighted' of a {}-D expert stack is not implemented (its calibration "
                                  "is per expert module); give its rule `rounding: mse`",
                                  shape.size()),
                      {recipe_.path, tensor});
    if (options_.calibration_path.empty())
      throw_bad_input("rounding 'weighted' weighs each input channel by its mean squared activation, which needs a "
                      "calibration",
                      {recipe_.path, tensor}, ErrorHint::CalibrationFile);
    if (!moments_) moments_ = load_input_moments(options_.calibration_path);
    const auto it = moments_->find(module);
    if (it == moments_->end())
      throw_bad_input(fmt::format("no input second moments for module '{}' (rounding 'weighted'); was the "
                                  "calibration made on this model?",
                                  module),
                      {options_.calibration_path, tensor});
    if (static_cast<std::int64_t>(it->second->size()) != shape[1])
      throw_bad_input(fmt::format("input second moments of '{}' have {} channels, the weight has {} inputs",
                                  module, it->second->size(), shape[1]),
                      {options_.calibration_path, tensor});
    return it->second;
  }

  // A pre-quantized module's stored weight (the finder is built when first needed).
  StoredWeight find_stored(const std::string& module) {
    if (!stored_weights_) {
      std::vector<std::string> modules;
      for (const auto& t : ckpt_.tensors())
        if (is_weight_tensor_of_module(t.info.name)) modules.push_back(recipe::owning_module(t.info.name));
      stored_weights_ = std::make_unique<StoredWeightFinder>(ckpt_, std::move(modules), model_dtype_);
    }
    return stored_weights_->find(module);
  }

  const io::Checkpoint& ckpt_;
  const recipe::Recipe& recipe_;
  const PlanOptions& options_;
  Plan& plan_;
  const DType model_dtype_;
  bool keeps_source_groups_{false};
  std::optional<InputMoments> moments_;                 // read when a rule first rounds `weighted`
  std::unique_ptr<StoredWeightFinder> stored_weights_;  // only when something is re-quantized
  std::set<std::string> linear_modules_;                // already in plan_.linear_modules
};

// Output names must be unique (a dialect suffix colliding with an existing
// tensor would silently overwrite it).
void check_unique_output_names(const Plan& plan) {
  std::unordered_set<std::string_view> names;
  names.reserve(plan.tensors.size() * 2);
  for (const auto& t : plan.tensors)
    for (const auto& o : t.outputs)
      if (!names.insert(o.info.name).second)
        throw_bad_input(fmt::format("two output tensors would be named '{}'", o.info.name), {plan.source, t.source});
}

// The source's rotation record; a recipe asking for a rotation its source
// does not carry is refused (rotating is a pass over the whole checkpoint
// before planning, which `selq quantize` runs and a plan cannot).
nlohmann::json source_rotation(const io::Checkpoint& ckpt, const recipe::Recipe& recipe) {
  nlohmann::json record = ckpt.is_remote() ? nlohmann::json() : io::read_rotation_record(ckpt.dir());
  const std::string has = record.is_null() ? "none" : record["rotation"].get<std::string>();
  if (!recipe.rotation.empty() && recipe.rotation != has)
    throw_bad_input(fmt::format("the recipe asks for rotation {}, and the source carries {}: rotate the float source "
                                "first (a rotation is folded into every weight before planning)",
                                recipe.rotation, has == "none" ? "none" : "rotation " + has),
                    {recipe.path});
  if (!record.is_null() && recipe.rotation_block != record.value("block", 0))
    throw_bad_input(fmt::format("the recipe asks for rotation blocks of {}, and the source was rotated in blocks of {} "
                                "(0: the whole hidden size)",
                                recipe.rotation_block, record.value("block", 0)),
                    {recipe.path});
  return record;
}

}  // namespace

Plan make_plan(const io::Checkpoint& ckpt, const recipe::Recipe& recipe, const PlanOptions& options) {
  Plan plan;
  plan.source = ckpt.dir();
  plan.calibration = options.calibration;
  plan.recipe_path = recipe.path;
  plan.rotation = source_rotation(ckpt, recipe);
  plan.dialect = plan_dialect(recipe, options);
  {
    std::vector<TensorInfo> infos;
    infos.reserve(ckpt.tensors().size());
    for (const auto& t : ckpt.tensors()) infos.push_back(t.info);
    // Scoped: the resolver's tables are large at 70k tensors, and the decisions end up in plan.tensors.
    recipe::Resolution res = recipe::resolve_recipe(recipe, infos, ckpt.config());
    plan.warnings = res.warnings;
    if (options.strict && !plan.warnings.empty())
      throw_bad_input(fmt::format("strict planning refuses {} warning(s); first: {}", plan.warnings.size(),
                                  plan.warnings.front()),
                      {recipe.path});
    if (res.decisions.size() != infos.size())
      throw Error(ErrorKind::Internal, "recipe resolution returned a different tensor count");
    PlanBuilder builder(ckpt, recipe, options, plan);
    plan.tensors.reserve(infos.size());
    for (std::size_t i = 0; i < infos.size(); ++i) builder.add(i, res.decisions[i], std::move(infos[i]));
  }
  check_unique_output_names(plan);
  plan.shards = options.max_shard_bytes ? layout_capped_shards(plan.tensors, options.max_shard_bytes)
                                        : layout_source_shards(ckpt, plan.tensors);
  if (!options.build_config) return plan;
  try {
    plan.config = exporter::build_quantization_config(plan.dialect, config_input(ckpt, plan));
  } catch (const Error& e) {
    throw Error(e.kind(), e.message(), {recipe.path}, e.hint());
  }
  return plan;
}

exporter::ConfigInput config_input(const io::Checkpoint& source, const Plan& plan) {
  exporter::ConfigInput ci;
  ci.linear_modules = plan.linear_modules;
  std::vector<std::string> names;
  for (const auto& t : source.tensors()) names.push_back(t.info.name);
  ci.unstored_heads = exporter::unstored_head_modules(names);
  const nlohmann::json& src_config = source.config();
  if (src_config.is_object() && src_config.contains("quantization_config"))
    ci.source_quantization_config = src_config["quantization_config"];
  return ci;
}

}  // namespace selq::pipeline
