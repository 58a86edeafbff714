#pragma once
// The layer map: decoder layers down, module kinds across, one cell per
// (layer, kind) coloured by format or by measured error (SNR in dB). The
// routed experts of a layer share a cell per projection, summarised (their
// formats; the minimum, median and maximum SNR), so a 61-layer x 384-expert
// MoE draws as 61 short rows.
#include <string>
#include <utility>
#include <vector>

#include "report/manifest_data.h"
#include "report/palette.h"

namespace selq::report {

struct LayerMap {
  std::vector<std::string> kinds;  // columns in display order: attention, MLP, router, shared, routed experts
  int layers{0};                   // rows 0 .. layers-1
  // cells[layer][column]: the tensors of that cell (empty: the layer has no such module).
  std::vector<std::vector<std::vector<const TensorEntry*>>> cells;
  std::vector<const TensorEntry*> outside;  // weight matrices outside the decoder layers
  double snr_lo{0}, snr_hi{0};             // the error scale: whole dB around every finite SNR
};

LayerMap build_layer_map(const ManifestData& manifest);

enum class MapView { Format, Error };

// The SVG of one view. Each row is <g class="layer" data-layer="N">, each cell
// has id "fmt-L<layer>-<kind>" (or "snr-..."), data-format, and a <title> with
// the tensor name(s), shape, format, bytes and error.
std::string render_layer_map(const LayerMap& map, MapView view, const FormatPalette& palette);

// "12.3 dB", "exact" for an infinite SNR.
std::string snr_text(double snr_db);

// A short column heading: "self_attn.q_proj" -> "attn.q_proj", "mlp.experts.*.up_proj" -> "experts.up_proj".
std::string short_kind(const std::string& kind);

}  // namespace selq::report
