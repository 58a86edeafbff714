#pragma once
// Linear layers of the reference runtime, loaded the way a serving engine
// loads them: the checkpoint's own quantization_config decides each module's
// scheme (through the engine resolvers of export/engine_resolve.h); weights
// are dequantized from their stored bytes and activations are quantized per
// token as the scheme says, so the runtime measures what an engine would run.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/codecs.h"
#include "io/checkpoint.h"
#include "quant/scheme.h"
#include "runtime/model/matrix.h"

namespace selq::runtime {

class Linear {
 public:
  std::string module;                 // "model.layers.0.self_attn.q_proj"
  std::int64_t out{0}, in{0};
  Matrix weight;                      // [out, in], BF16 when exact, else F32 (dequantized when quantized)
  std::vector<float> bias;            // empty when none
  quant::ActMode act{quant::ActMode::None};
  float act_static_scale{0.0f};       // qdq_activation_row's static_scale
  ScaleRule act_rule{ScaleRule::Even};
  std::string scheme;                 // "bf16" or the scheme's name
  double stored_bits{0};              // LinearLoader::stored_bits(module)

  // y[t, :] = W * qdq(x[t, :]) (+ bias) for t < rows, on all TBB threads.
  // `x` is not modified. `rowwise`: each row's product as matvec computes it
  // (matmul_rowwise), whatever the other rows.
  void forward(const float* x, std::int64_t rows, float* y, bool rowwise = false) const;
};

// How the linears of a checkpoint are quantized, resolved once per model.
class LinearLoader {
 public:
  // `modules`: every linear module of the model (names without ".weight").
  // With `mapping` (what keeps `ckpt` open), unquantized BF16 weights are
  // read in place from its mapping (load_matrix), and quantized weights are
  // held as stored (runtime/model/stored_weight.h) when holding them dequantized
  // would take more than half the machine's memory, or always with
  // SELQ_RUNTIME_WEIGHTS=stored (=dequantized: never).
  LinearLoader(const io::Checkpoint& ckpt, std::vector<std::string> modules,
               std::shared_ptr<const void> mapping = {});
  ~LinearLoader();
  LinearLoader(const LinearLoader&) = delete;
  LinearLoader& operator=(const LinearLoader&) = delete;

  Linear load(const std::string& module) const;
  // Bits of every tensor the checkpoint stores for `module`'s weight (the
  // weight, its scales, global and input scales; not the bias), as
  // pipeline::Plan::linear_totals counts them (recipe::owning_module).
  double stored_bits(const std::string& module) const;
  // "compressed-tensors", "quark", "modelopt" or "" (unquantized checkpoint).
  const std::string& dialect() const { return dialect_; }
  // Quantized weights are held as stored, dequantized where used.
  bool holds_stored() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dialect_;
};

// A float tensor's values as a Matrix [rows, cols]: BF16 bits read in place
// when `mapping` keeps the view's checkpoint open (else copied as they are),
// any other float type through F32 (and stored BF16 when exact).
Matrix load_matrix(const TensorView& v, std::int64_t rows, std::int64_t cols,
                   const std::shared_ptr<const void>& mapping = {});

// What keeps a local checkpoint's mapping alive for load_matrix (the
// checkpoint itself); empty for a remote one, whose bytes are downloaded.
std::shared_ptr<const void> mapping_of(const std::shared_ptr<const io::Checkpoint>& ckpt);

// The SchemeSpec whose dialect config object equals `scheme_json` (the form
// the engine resolvers return); Unsupported when no known scheme matches.
quant::SchemeSpec scheme_from_config_json(const std::string& dialect, const nlohmann::json& scheme_json);

}  // namespace selq::runtime
