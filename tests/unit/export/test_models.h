#pragma once
// Synthetic module lists with real architectures' names, and the scheme
// decisions the resolution tests and the cross-check driver share.
#include <string>
#include <vector>

#include "export/dialect.h"

namespace selq::exporter::testing {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

inline SchemeSpec make(SchemeKind k, ActMode a) {
  SchemeSpec s;
  s.kind = k;
  s.act = a;
  return s;
}
inline SchemeSpec mxfp4_w4a4() { return make(SchemeKind::MXFP4, ActMode::MXFP4Dynamic); }
inline SchemeSpec fp8_ptpc() { return make(SchemeKind::FP8Channel, ActMode::FP8PerToken); }
inline SchemeSpec fp8_tensor_static() { return make(SchemeKind::FP8Tensor, ActMode::FP8StaticTensor); }
inline SchemeSpec fp8_tensor_dynamic() { return make(SchemeKind::FP8Tensor, ActMode::FP8DynamicTensor); }
inline SchemeSpec fp8_block() { return make(SchemeKind::FP8Block, ActMode::FP8PerTokenGroup128); }
inline SchemeSpec nvfp4_w4a4() { return make(SchemeKind::NVFP4, ActMode::NVFP4); }
inline SchemeSpec nvfp4_w4a16() { return make(SchemeKind::NVFP4, ActMode::None); }
inline SchemeSpec mxfp8() { return make(SchemeKind::MXFP8, ActMode::MXFP8Dynamic); }
inline SchemeSpec int4_g128() {
  SchemeSpec s = make(SchemeKind::IntGroup, ActMode::None);
  s.bits = 4;
  s.group_size = 128;
  return s;
}

struct ModelSchemes {
  std::optional<SchemeSpec> attn;       // projections other than o_proj
  std::optional<SchemeSpec> o_proj;
  std::optional<SchemeSpec> mlp;        // dense gate/up
  std::optional<SchemeSpec> down;       // dense down
  std::optional<SchemeSpec> experts;    // routed experts
  std::optional<SchemeSpec> late_mlp;   // dense mlp of the last main layer
};

// (a) dspark-like: 5 layers of MLA attention + dense MLP, the last one the
// MTP layer (eh_proj, shared_head.head) which stays in float, plus a float
// context_proj and lm_head.
inline std::vector<ModuleDecision> dspark_model(const ModelSchemes& s) {
  std::vector<ModuleDecision> out;
  for (int l = 0; l < 5; ++l) {
    bool mtp = l == 4;
    std::string p = "model.layers." + std::to_string(l) + ".";
    auto attn = mtp ? std::nullopt : s.attn;
    for (const char* m : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                          "self_attn.kv_b_proj"})
      out.push_back({p + m, attn});
    out.push_back({p + "self_attn.o_proj", mtp ? std::nullopt : s.o_proj});
    for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) out.push_back({p + m, mtp ? std::nullopt : s.attn});
    if (mtp) {
      out.push_back({p + "eh_proj", std::nullopt});
      out.push_back({p + "shared_head.head", std::nullopt});
    }
  }
  out.push_back({"model.context_proj", std::nullopt});
  out.push_back({"lm_head", std::nullopt});
  return out;
}

// (b) llama with mixed schemes: layer 0 float, layers 1-3 per `s`, layer 3's
// MLP per `late_mlp`.
inline std::vector<ModuleDecision> llama_model(const ModelSchemes& s) {
  std::vector<ModuleDecision> out;
  for (int l = 0; l < 4; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    bool f = l == 0;
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})
      out.push_back({p + m, f ? std::nullopt : s.attn});
    out.push_back({p + "self_attn.o_proj", f ? std::nullopt : s.o_proj});
    auto mlp = l == 3 ? s.late_mlp : s.mlp;
    auto down = l == 3 ? s.late_mlp : s.down;
    out.push_back({p + "mlp.gate_proj", f ? std::nullopt : mlp});
    out.push_back({p + "mlp.up_proj", f ? std::nullopt : mlp});
    out.push_back({p + "mlp.down_proj", f ? std::nullopt : down});
  }
  out.push_back({"lm_head", std::nullopt});
  return out;
}

// (c) kimi-like MoE (DeepseekV3 names): layer 0 dense, layers 1-2 MoE with
// 8 routed experts, float shared experts and the float router, layer 3 the
// float MTP layer (MoE too), float lm_head.
inline std::vector<ModuleDecision> kimi_model(const ModelSchemes& s) {
  std::vector<ModuleDecision> out;
  for (int l = 0; l < 4; ++l) {
    bool mtp = l == 3;
    std::string p = "model.layers." + std::to_string(l) + ".";
    auto attn = mtp ? std::nullopt : s.attn;
    for (const char* m : {"self_attn.q_a_proj", "self_attn.q_b_proj", "self_attn.kv_a_proj_with_mqa",
                          "self_attn.kv_b_proj", "self_attn.o_proj"})
      out.push_back({p + m, attn});
    if (l == 0) {
      for (const char* m : {"mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) out.push_back({p + m, s.mlp});
      continue;
    }
    out.push_back({p + "mlp.gate", std::nullopt});
    for (int e = 0; e < 8; ++e) {
      for (const char* m : {"gate_proj", "up_proj", "down_proj"})
        out.push_back({p + "mlp.experts." + std::to_string(e) + "." + m, mtp ? std::nullopt : s.experts});
    }
    for (const char* m : {"mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj", "mlp.shared_experts.down_proj"})
      out.push_back({p + m, std::nullopt});
    if (mtp) out.push_back({p + "eh_proj", std::nullopt});
  }
  out.push_back({"lm_head", std::nullopt});
  return out;
}

// The per-dialect scheme choices for the three models (each dialect can
// express different schemes).
inline ModelSchemes dspark_schemes(Dialect d) {
  if (d == Dialect::ModelOpt) return {fp8_tensor_static(), nvfp4_w4a4(), {}, {}, {}, {}};
  return {fp8_ptpc(), mxfp4_w4a4(), {}, {}, {}, {}};
}
inline ModelSchemes llama_schemes(Dialect d) {
  switch (d) {
    case Dialect::CompressedTensors:
      return {fp8_ptpc(), nvfp4_w4a4(), mxfp4_w4a4(), int4_g128(), {}, fp8_block()};
    case Dialect::Quark:
      return {fp8_ptpc(), nvfp4_w4a4(), mxfp4_w4a4(), fp8_tensor_dynamic(), {}, fp8_block()};
    case Dialect::ModelOpt:
      return {fp8_tensor_static(), nvfp4_w4a4(), nvfp4_w4a16(), mxfp8(), {}, fp8_tensor_static()};
  }
  return {};
}
inline ModelSchemes kimi_schemes(Dialect d) {
  if (d == Dialect::ModelOpt) return {fp8_tensor_static(), {}, fp8_tensor_static(), {}, nvfp4_w4a4(), {}};
  return {fp8_ptpc(), {}, fp8_ptpc(), {}, mxfp4_w4a4(), {}};
}

}  // namespace selq::exporter::testing
