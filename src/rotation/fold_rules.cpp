#include "rotation/fold_rules.h"

#include <regex>

#include <fmt/format.h>

#include "core/error.h"
#include "core/expert_name.h"
#include "runtime/model/architectures.h"
#include "runtime/model/hf_config.h"

namespace selq::rotation {
namespace {

using Matrix = SegmentRotation::Matrix;

std::int64_t int_field(const nlohmann::json& c, const char* key, const std::string& source) {
  if (!c.contains(key) || !c[key].is_number_integer() || c[key].get<std::int64_t>() < 1)
    throw_bad_input(fmt::format("{}: config.json has no positive integer '{}', which a rotation needs", source, key));
  return c[key].get<std::int64_t>();
}

TensorFold reads_residual(const std::string& norm) {
  TensorFold f;
  f.input_scale = norm;
  f.input = SegmentRotation{};
  return f;
}
TensorFold folded_norm() {
  TensorFold f;
  f.ones = true;
  return f;
}
TensorFold writes_residual() {
  TensorFold f;
  f.output = SegmentRotation{};
  return f;
}

}  // namespace

RotationKind parse_rotation_kind(const std::string& text, const std::string& what) {
  if (text == "none") return RotationKind::None;
  if (text == "r1") return RotationKind::R1;
  if (text == "r1r2") return RotationKind::R1R2;
  throw_bad_input(fmt::format("{}: unknown rotation '{}' (none, r1 or r1r2)", what, text));
}

const char* rotation_kind_name(RotationKind k) {
  switch (k) {
    case RotationKind::None: return "none";
    case RotationKind::R1: return "r1";
    case RotationKind::R1R2: return "r1r2";
  }
  return "none";
}

RotationShape rotation_shape(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw_bad_input(fmt::format("{}: no config.json, which a rotation needs", source));
  const auto& c = runtime::decoder_config(config);
  const std::string mt = c.value("model_type", "");
  const auto* arch = runtime::find_runtime_architecture(mt);
  if (!arch)
    throw_unsupported(fmt::format("{}: a rotation folds into the architectures the runtime runs, not model_type '{}'",
                                  source, mt));
  if (&c != &config)
    throw_unsupported(fmt::format("{}: a rotation of a multimodal checkpoint (its decoder in text_config) is not "
                                  "supported: its vision tower writes into the residual stream",
                                  source));
  RotationShape s;
  s.family = arch->family;
  s.hidden = int_field(c, "hidden_size", source);
  s.heads = int_field(c, "num_attention_heads", source);
  s.tied_head = c.value("tie_word_embeddings", false);
  if (s.family == "deepseek-v3") {
    s.head_dim = int_field(c, "v_head_dim", source);
    s.qk_nope = int_field(c, "qk_nope_head_dim", source);
    s.kv_heads = s.heads;
  } else {
    s.kv_heads = c.contains("num_key_value_heads") ? int_field(c, "num_key_value_heads", source) : s.heads;
    s.head_dim = c.contains("head_dim") && !c["head_dim"].is_null() ? int_field(c, "head_dim", source)
                                                                     : s.hidden / s.heads;
  }
  return s;
}

TensorFold tensor_fold(const RotationShape& s, RotationKind kind, const std::string& name) {
  if (kind == RotationKind::None) return {};
  const bool r2 = kind == RotationKind::R1R2;
  if (name == "model.embed_tokens.weight") {
    TensorFold f;
    f.input = SegmentRotation{};
    return f;
  }
  if (name == "model.norm.weight") return folded_norm();
  if (name == "lm_head.weight") return reads_residual("model.norm.weight");

  static const std::regex layer(R"(model\.layers\.(\d+)\.(.+))");
  std::smatch m;
  if (!std::regex_match(name, m, layer))
    throw_bad_input(fmt::format("a rotation has no rule for '{}', which is outside the decoder's layers", name), {"", name});
  const std::string p = fmt::format("model.layers.{}.", m[1].str());
  const std::string rest = m[2].str();
  const std::string in_norm = p + "input_layernorm.weight", post_norm = p + "post_attention_layernorm.weight";

  if (rest == "input_layernorm.weight" || rest == "post_attention_layernorm.weight") return folded_norm();
  // A dense MLP's, a shared expert's or (core/expert_name.h) a routed expert's projection.
  const auto routed = parse_routed_expert(name);
  const std::string proj = routed ? std::string(routed->rest)
                           : rest.starts_with("mlp.shared_experts.") ? rest.substr(19)
                           : rest.starts_with("mlp.") ? rest.substr(4) : std::string();
  if (proj == "down_proj.weight") return writes_residual();
  if (proj == "gate_proj.weight" || proj == "up_proj.weight") return reads_residual(post_norm);
  if (rest == "mlp.experts.gate_up_proj") return reads_residual(post_norm);  // transformers 5 stack [E, 2I, H]
  if (rest == "mlp.experts.down_proj") return writes_residual();              // [E, H, I]
  if (rest == "mlp.gate.weight") return reads_residual(post_norm);             // the router reads the stream too
  if (rest == "mlp.gate.e_score_correction_bias" || rest == "self_attn.rotary_emb.inv_freq") return {};

  const SegmentRotation head{Matrix::Head, s.head_dim, 0};
  if (rest == "self_attn.o_proj.weight" || rest == "self_attn.o_proj.bias") {
    TensorFold f = writes_residual();
    if (r2 && rest.ends_with(".weight")) f.input = head;  // W_o blockdiag(R)
    return f;
  }
  if (s.family == "deepseek-v3") {
    if (rest == "self_attn.q_proj.weight" || rest == "self_attn.q_a_proj.weight" ||
        rest == "self_attn.kv_a_proj_with_mqa.weight")
      return reads_residual(in_norm);
    if (rest == "self_attn.kv_b_proj.weight") {
      TensorFold f;
      if (r2) f.output = SegmentRotation{Matrix::Head, s.qk_nope + s.head_dim, s.qk_nope};  // each head's value rows
      return f;
    }
    if (rest == "self_attn.q_b_proj.weight" || rest == "self_attn.q_a_layernorm.weight" ||
        rest == "self_attn.kv_a_layernorm.weight")
      return {};
  } else {
    static const std::regex qkv(R"(self_attn\.([qkv])_proj\.(weight|bias))");
    std::smatch qm;
    if (std::regex_match(rest, qm, qkv)) {
      TensorFold f;
      if (qm[2] == "weight") f = reads_residual(in_norm);
      if (r2 && qm[1] == "v") f.output = head;  // each value head's rows R^T W_h (its bias b_h R)
      return f;
    }
  }
  throw_bad_input(fmt::format("a rotation has no rule for '{}' ({} family): it cannot tell whether the tensor reads "
                              "or writes the residual stream",
                              name, s.family),
                  {"", name});
}

}  // namespace selq::rotation
