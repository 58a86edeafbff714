#pragma once
// What a rotation does to each tensor of a decoder the runtime runs, by name.
//
// R1 (QuaRot/SpinQuant): the residual stream x becomes x Q. Every RMSNorm's
// scale g is folded into the linears that read it (their input columns times
// g, the norm's weight then all ones: RMSNorm(xQ) = RMSNorm(x) Q because Q
// keeps the mean square), those readers become W diag(g) Q, the writers into
// the stream (o_proj, down_proj) Q^T W, the embedding rows E Q and the head
// H diag(g_final) Q (a tied head is written out, untied).
// R2 (per attention head): each value head v becomes v R, so v_proj's rows of
// a head (MLA: kv_b_proj's value rows) are R^T W_h, and o_proj's columns of
// that head W_o,h R. Attention mixes value vectors linearly, so it commutes.
// Nothing else changes: q/k/RoPE, MLA's inner norms, the router's bias.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::rotation {

enum class RotationKind { None, R1, R1R2 };
// "none", "r1" or "r1r2"; BadInput naming `what` and the choices otherwise.
RotationKind parse_rotation_kind(const std::string& text, const std::string& what);
const char* rotation_kind_name(RotationKind k);

// One orthogonal matrix applied to segments of a row: for each k,
// x[k * period + offset, ... + size) becomes that segment times Q (or Q^T).
struct SegmentRotation {
  enum class Matrix { Residual, Head } matrix{Matrix::Residual};
  std::int64_t period{0};  // 0: the whole row is one segment of the matrix's size
  std::int64_t offset{0};
};

// What happens to one tensor, viewed as [batch..., out, in] (1-D: [out]).
struct TensorFold {
  bool ones{false};                    // a folded norm: every element 1
  std::string input_scale;             // a norm whose weight multiplies each input column first
  std::optional<SegmentRotation> input;   // rows (length in) times Q
  std::optional<SegmentRotation> output;  // columns (length out) times Q: W <- Q^T W; a 1-D bias b Q
  bool changes() const { return ones || !input_scale.empty() || input || output; }
};

// Sizes a decoder's rotation needs, from its config.json.
struct RotationShape {
  std::string family;          // "llama" or "deepseek-v3"
  std::int64_t hidden{0};
  std::int64_t head_dim{0};    // the value head's size (MLA: v_head_dim)
  std::int64_t heads{0};       // attention heads
  std::int64_t kv_heads{0};    // value heads of v_proj (llama); heads for MLA
  std::int64_t qk_nope{0};     // MLA: k_nope rows before each head's value rows in kv_b_proj
  bool tied_head{false};
};
// Unsupported in one line when the model_type is not one the runtime runs.
RotationShape rotation_shape(const nlohmann::json& config, const std::string& source);

// The fold of tensor `name`; BadInput naming the tensor when a tensor of a
// decoder layer has no rule (a rotation that skipped it would be wrong).
TensorFold tensor_fold(const RotationShape& shape, RotationKind kind, const std::string& name);

}  // namespace selq::rotation
