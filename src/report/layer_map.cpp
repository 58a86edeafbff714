#include "report/layer_map.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "report/markup.h"

namespace selq::report {
namespace {

// Column order: attention, dense MLP and router, shared experts, routed experts, the rest.
int kind_group(const std::string& kind) {
  if (kind.starts_with("self_attn.")) return 0;
  if (kind.starts_with("mlp.experts.")) return 3;
  if (kind.starts_with("mlp.shared_experts.")) return 2;
  if (kind.starts_with("mlp.")) return 1;
  return 4;
}

int leaf_rank(const std::string& kind) {
  static const std::vector<std::string> order = {
      "q_proj", "q_a_proj", "q_b_proj", "k_proj", "v_proj", "kv_a_proj_with_mqa", "kv_b_proj", "o_proj",
      "attn_res_proj", "gate_proj", "w1", "up_proj", "w3", "down_proj", "w2", "gate"};
  const std::string leaf = kind.substr(kind.rfind('.') + 1);
  auto it = std::find(order.begin(), order.end(), leaf);
  return it == order.end() ? static_cast<int>(order.size()) : static_cast<int>(it - order.begin());
}

bool is_experts(const std::vector<const TensorEntry*>& cell) {
  return cell.size() > 1 || (!cell.empty() && cell.front()->kind.find(".experts.*.") != std::string::npos);
}

std::string shape_text(const Shape& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

struct Summary {
  std::vector<std::pair<std::string, std::size_t>> formats;  // format, count (by count, then name)
  std::uint64_t before{0}, after{0};
  std::vector<double> snr;  // sorted, quantized members only
  std::vector<Shape> shapes;
  double snr_at(double fraction) const {
    return snr[static_cast<std::size_t>(std::lround(fraction * static_cast<double>(snr.size() - 1)))];
  }
};

Summary summarise(const std::vector<const TensorEntry*>& cell) {
  Summary s;
  std::map<std::string, std::size_t> formats;
  for (const auto* t : cell) {
    ++formats[t->format];
    s.before += t->source_bytes;
    s.after += t->stored_bytes;
    if (t->snr_db) s.snr.push_back(*t->snr_db);
    if (std::find(s.shapes.begin(), s.shapes.end(), t->shape) == s.shapes.end()) s.shapes.push_back(t->shape);
  }
  s.formats.assign(formats.begin(), formats.end());
  std::stable_sort(s.formats.begin(), s.formats.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::sort(s.snr.begin(), s.snr.end());
  return s;
}

std::string tooltip(const std::vector<const TensorEntry*>& cell, int layer, const std::string& kind) {
  const Summary s = summarise(cell);
  std::string shapes;
  for (const auto& sh : s.shapes) shapes += (shapes.empty() ? "" : ", ") + shape_text(sh);
  const std::string bytes = fmt::format("{} -> {}", decimal_bytes(s.before), decimal_bytes(s.after));
  if (!is_experts(cell)) {
    const auto* t = cell.front();
    return fmt::format("{}\nshape {}\nformat {}\nbytes {}\nerror {}", t->name, shapes, t->format, bytes,
                       t->snr_db ? "SNR " + snr_text(*t->snr_db) : std::string("none (kept)"));
  }
  std::string formats;
  for (const auto& [f, n] : s.formats) formats += fmt::format("{}{} x{}", formats.empty() ? "" : ", ", f, n);
  std::string err = "none (kept)";
  if (!s.snr.empty())
    err = fmt::format("SNR min {}, median {}, max {}", snr_text(s.snr.front()), snr_text(s.snr_at(0.5)),
                      snr_text(s.snr.back()));
  return fmt::format("layer {} {} ({} experts)\nshape {}\nformat {}\nbytes {}\nerror {}", layer, kind, cell.size(),
                     shapes, formats, bytes, err);
}

}  // namespace

std::string snr_text(double snr_db) {
  return std::isfinite(snr_db) ? fmt::format("{:.1f} dB", snr_db) : std::string("exact");
}

std::string short_kind(const std::string& kind) {
  std::string k = kind;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"self_attn.", "attn."}, {"mlp.experts.*.", "experts."}, {"mlp.shared_experts.", "shared."}})
    if (k.starts_with(from)) return to + k.substr(from.size());
  return k;
}

LayerMap build_layer_map(const ManifestData& manifest) {
  LayerMap map;
  map.layers = manifest.layers;
  std::vector<std::string> kinds;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& t : manifest.tensors) {
    if (!t.linear) continue;
    if (t.snr_db && std::isfinite(*t.snr_db)) {
      lo = std::min(lo, *t.snr_db);
      hi = std::max(hi, *t.snr_db);
    }
    if (t.layer < 0) {
      map.outside.push_back(&t);
    } else if (std::find(kinds.begin(), kinds.end(), t.kind) == kinds.end()) {
      kinds.push_back(t.kind);
    }
  }
  std::stable_sort(kinds.begin(), kinds.end(), [](const std::string& a, const std::string& b) {
    return std::make_tuple(kind_group(a), leaf_rank(a), a) < std::make_tuple(kind_group(b), leaf_rank(b), b);
  });
  map.kinds = kinds;
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < kinds.size(); ++i) column[kinds[i]] = i;
  map.cells.assign(static_cast<std::size_t>(map.layers), std::vector<std::vector<const TensorEntry*>>(kinds.size()));
  for (const auto& t : manifest.tensors)
    if (t.linear && t.layer >= 0) map.cells[static_cast<std::size_t>(t.layer)][column[t.kind]].push_back(&t);
  if (std::isfinite(lo)) {
    map.snr_lo = std::floor(lo);
    map.snr_hi = std::max(std::ceil(hi), map.snr_lo + 1);
  }
  return map;
}

namespace {

// Where the grid, its headings and the legend go.
struct MapGeometry {
  double cw, ch, left, top, right, grid_w, grid_h, legend_top;
};

// Cells as wide as ~360 px allows (14-40 px); headings rotated by 60 degrees
// need ~5.6 px per character, sin 60 of it upwards and cos 60 to the right.
MapGeometry map_geometry(const LayerMap& map) {
  MapGeometry g{};
  const double ncols = static_cast<double>(std::max<std::size_t>(map.kinds.size(), 1));
  g.cw = std::clamp(std::floor(360 / ncols), 14.0, 40.0);
  g.ch = map.layers > 40 ? 11 : 15;
  g.left = 34;
  std::size_t longest = 4;
  for (const auto& k : map.kinds) longest = std::max(longest, short_kind(k).size());
  g.top = 30 + 5.6 * 0.87 * static_cast<double>(longest);
  g.right = 10 + 2.8 * static_cast<double>(longest);
  g.grid_w = g.cw * static_cast<double>(map.kinds.size());
  g.grid_h = g.ch * map.layers;
  g.legend_top = g.top + g.grid_h + 16;
  return g;
}

// Every format in the map (cells and outside), sorted.
std::vector<std::string> map_formats(const LayerMap& map) {
  std::vector<std::string> formats;
  const auto add = [&](const TensorEntry* t) {
    if (std::find(formats.begin(), formats.end(), t->format) == formats.end()) formats.push_back(t->format);
  };
  for (const auto& row : map.cells)
    for (const auto& cell : row)
      for (const auto* t : cell) add(t);
  for (const auto* t : map.outside) add(t);
  std::sort(formats.begin(), formats.end());
  return formats;
}

// One (layer, kind) cell: one rectangle, or several parts side by side
// (formats in proportion to their counts, or the error's minimum | median |
// maximum).
std::string map_cell(const LayerMap& map, MapView view, const FormatPalette& palette, const MapGeometry& g, int l,
                     std::size_t c) {
  const auto& cell = map.cells[static_cast<std::size_t>(l)][c];
  const bool fmt_view = view == MapView::Format;
  const double x = g.left + g.cw * static_cast<double>(c), y = g.top + g.ch * l;
  const std::string id = fmt::format("{}-L{}-{}", fmt_view ? "fmt" : "snr", l, map.kinds[c]);
  const std::string title = xml_escape(tooltip(cell, l, map.kinds[c]));
  const Summary s = summarise(cell);
  const double w = g.cw - 1, h = g.ch - 1;
  if (fmt_view && s.formats.size() == 1)
    return fmt::format("<rect id=\"{}\" class=\"cell\" data-format=\"{}\" x=\"{}\" y=\"{:.1f}\" width=\"{}\" "
                       "height=\"{}\" fill=\"{}\"><title>{}</title></rect>\n",
                       xml_escape(id), xml_escape(s.formats[0].first), x, y, w, h, palette.color(s.formats[0].first),
                       title);
  std::vector<std::pair<double, std::string>> parts;  // width fraction, colour
  if (fmt_view) {
    for (const auto& [f, n] : s.formats)
      parts.push_back({static_cast<double>(n) / static_cast<double>(cell.size()), palette.color(f)});
  } else if (s.snr.empty()) {
    parts.push_back({1.0, kExactColor});
  } else if (!is_experts(cell)) {
    parts.push_back({1.0, viridis(s.snr.front(), map.snr_lo, map.snr_hi)});
  } else {
    for (double f : {0.0, 0.5, 1.0}) parts.push_back({1.0 / 3, viridis(s.snr_at(f), map.snr_lo, map.snr_hi)});
  }
  std::string o = fmt::format("<g id=\"{}\" class=\"cell\" data-format=\"{}\"><title>{}</title>", xml_escape(id),
                              xml_escape(s.formats[0].first), title);
  double px = x;
  for (const auto& [frac, color] : parts) {
    o += fmt::format("<rect x=\"{:.2f}\" y=\"{:.1f}\" width=\"{:.2f}\" height=\"{}\" fill=\"{}\"/>", px, y, frac * w,
                     h, color);
    px += frac * w;
  }
  return o + "</g>\n";
}

// One swatch per format with its tensor count.
std::string format_legend(const LayerMap& map, const FormatPalette& palette, const MapGeometry& g,
                          const std::vector<std::string>& formats) {
  std::map<std::string, std::size_t> counts;
  for (const auto& row : map.cells)
    for (const auto& cell : row)
      for (const auto* t : cell) ++counts[t->format];
  for (const auto* t : map.outside) ++counts[t->format];
  std::string o;
  for (std::size_t i = 0; i < formats.size(); ++i) {
    const double y = g.legend_top + 18.0 * static_cast<double>(i);
    o += fmt::format("<rect class=\"swatch\" data-format=\"{}\" x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" "
                     "fill=\"{}\"/><text x=\"{}\" y=\"{}\">{} ({} tensors)</text>\n",
                     xml_escape(formats[i]), g.left, y, palette.color(formats[i]), g.left + 18, y + 10,
                     xml_escape(formats[i]), counts[formats[i]]);
  }
  return o;
}

// The SNR scale and its notes.
std::string error_legend(const LayerMap& map, const MapGeometry& g) {
  const double bw = std::min(g.grid_w, 220.0), left = g.left, top = g.legend_top;
  std::string o = "<defs><linearGradient id=\"snr-scale\">";
  for (int i = 0; i <= 8; ++i)
    o += fmt::format("<stop offset=\"{}\" stop-color=\"{}\"/>", i / 8.0, viridis(i / 8.0, 0, 1));
  o += "</linearGradient></defs>\n";
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"url(#snr-scale)\"/>\n", left, top, bw);
  o += fmt::format("<text x=\"{}\" y=\"{}\">{:.0f} dB (more error)</text>\n", left, top + 24, map.snr_lo);
  o += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.0f} dB</text>\n", left + bw, top + 24, map.snr_hi);
  o += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">"
                   "kept unquantized (no error)</text>\n",
                   left, top + 32, kExactColor, left + 18, top + 42);
  o += fmt::format("<text x=\"{}\" y=\"{}\">experts: min | median | max SNR of the layer's experts</text>\n", left,
                   top + 62);
  return o;
}

}  // namespace

std::string render_layer_map(const LayerMap& map, MapView view, const FormatPalette& palette) {
  const MapGeometry g = map_geometry(map);
  const bool fmt_view = view == MapView::Format;
  const std::vector<std::string> formats = map_formats(map);
  const double legend_h = fmt_view ? 18.0 * static_cast<double>(formats.size()) + 8 : 78;
  const double width = std::max(g.left + g.grid_w + g.right, 340.0), height = g.legend_top + legend_h;
  std::string o = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"layer-map\" id=\"map-{}\" viewBox=\"0 0 {} {}\" "
      "width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"10\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      fmt_view ? "fmt" : "snr", width, height, width, height);
  o += fmt::format("<text x=\"4\" y=\"16\" font-size=\"13\" font-weight=\"bold\">{}</text>\n",
                   fmt_view ? "Format by layer and module" : "Measured error by layer and module (SNR, dB)");
  // Column headings, rotated so that long kinds fit over narrow columns.
  for (std::size_t c = 0; c < map.kinds.size(); ++c) {
    const double x = g.left + g.cw * static_cast<double>(c) + g.cw / 2 + 3;
    o += fmt::format("<text transform=\"translate({:.1f} {}) rotate(-60)\"><title>{}</title>{}</text>\n", x, g.top - 4,
                     xml_escape(map.kinds[c]), xml_escape(short_kind(map.kinds[c])));
  }
  for (int l = 0; l < map.layers; ++l) {
    o += fmt::format("<g class=\"layer\" data-layer=\"{}\">\n", l);
    if (map.layers <= 40 || l % 5 == 0 || l == map.layers - 1)
      o += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", g.left - 4,
                       g.top + g.ch * l + g.ch - 2, l);
    for (std::size_t c = 0; c < map.kinds.size(); ++c)
      if (!map.cells[static_cast<std::size_t>(l)][c].empty()) o += map_cell(map, view, palette, g, l, c);
    o += "</g>\n";
  }
  o += fmt_view ? format_legend(map, palette, g, formats) : error_legend(map, g);
  return o + "</svg>\n";
}

}  // namespace selq::report
