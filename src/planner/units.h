#pragma once
// Decision units: the modules that must share one format because an engine
// builds them as one (q/k/v -> qkv_proj, gate/up -> gate_up_proj, every expert
// of an MoE layer -> one experts module; export/module_names.h is the table),
// and what each candidate format costs for them in exact stored bytes.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "export/dialect.h"
#include "io/checkpoint.h"
#include "planner/candidates.h"

namespace selq::planner {

struct UnitMember {
  std::string module;  // checkpoint module ("model.layers.0.self_attn.q_proj")
  TensorInfo weight;   // its float weight tensor
};

struct DecisionUnit {
  std::string name;  // engine module ("model.layers.0.self_attn.qkv_proj")
  std::string kind;  // the same relative to its layer ("self_attn.qkv_proj", "mlp.experts")
  int layer{-1};     // -1 outside decoder layers
  std::vector<UnitMember> members;
  std::uint64_t parameters() const;
};

struct UnitLayout {
  std::vector<DecisionUnit> units;
  // Linear-module bytes no unit decides (protected weights such as heads and
  // routers, biases, pre-quantized modules), and the weight elements that
  // Plan::bits_per_weight divides by: so that a choice's bits per weight is
  // exactly what `selq plan` of its recipe reports.
  std::uint64_t fixed_bytes{0};
  std::uint64_t linear_elements{0};
  DType model_dtype{DType::BF16};
  exporter::Dialect dialect{exporter::Dialect::CompressedTensors};
};

// The units of a checkpoint (headers only): every eligible, unprotected,
// not pre-quantized float linear weight belongs to exactly one.
UnitLayout decision_units(const io::Checkpoint& checkpoint, exporter::Dialect dialect);

// Stored bytes of `unit` under `candidate` in the layout's dialect, or
// nullopt when the candidate cannot quantize one of its members (shape).
std::optional<std::uint64_t> unit_cost(const UnitLayout& layout, const DecisionUnit& unit, const Candidate& candidate);

// Quantizes `src` with `spec` into `storage` (grown as needed) and adds its
// error to `metrics`; returns the output tensors in scheme_outputs order.
std::vector<std::span<std::uint8_t>> quantize_to_buffer(const quant::SchemeSpec& spec, const TensorView& src,
                                                       std::vector<std::uint8_t>& storage,
                                                       quant::ErrorMetrics& metrics,
                                                       const quant::TensorQuantizeOptions& options = {});

// The candidate's SchemeSpec as the layout's dialect writes it.
quant::SchemeSpec dialect_spec(const UnitLayout& layout, const Candidate& candidate);

}  // namespace selq::planner
