#pragma once
// The one parser of routed-expert names: "<experts>.<index>[.<rest>]", where
// <experts> ends in the component "experts" and <index> is digits
// ("model.layers.3.mlp.experts.7.down_proj": experts "model.layers.3.mlp.experts",
// index "7", rest "down_proj"). The recipe's fused groups and layer kinds, the dialects' expert
// parents, calibration's per-expert routing and synth ask it; "shared_experts"
// and a 3-D stack ("...experts.gate_up_proj", no index) are not routed experts'
// own names.
#include <optional>
#include <string_view>

namespace selq {

struct RoutedExpertName {
  std::string_view experts;  // the name through its "experts" component
  std::string_view index;    // the expert's number, as written
  std::string_view rest;     // what follows the index ("" for the expert's own prefix)
};

// The first "experts.<digits>" pair of components in `name`, or none. The
// views point into `name`.
std::optional<RoutedExpertName> parse_routed_expert(std::string_view name);

// The name through its first component "experts" that something follows: a
// routed expert's or a 3-D stack's ("...mlp.experts.gate_up_proj") container,
// which engines build as one fused MoE module; none otherwise.
std::optional<std::string_view> experts_container(std::string_view name);

}  // namespace selq
