#include "report/html_report.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/expert_name.h"
#include "io/atomic_file.h"
#include "pipeline/manifest.h"
#include "planner/sensitivity.h"
#include "report/bars.h"
#include "report/eval_data.h"
#include "report/front.h"
#include "report/histogram.h"
#include "report/layer_map.h"
#include "report/manifest_data.h"
#include "report/markup.h"
#include "report/palette.h"

namespace fs = std::filesystem;

namespace selq::report {
namespace {

// Wide pictures shrink to the page (viewBox keeps them sharp); tables too
// wide for it scroll inside their box, so the page never scrolls sideways.
constexpr const char* kStyle = R"(
body { font-family: sans-serif; margin: 0 auto; padding: 12px 16px; max-width: 1240px; color: #222; }
h1 { font-size: 20px; margin: 4px 0 2px; } h2 { font-size: 16px; margin: 22px 0 6px; border-bottom: 1px solid #ddd; }
p.note { color: #555; font-size: 13px; margin: 4px 0; }
.row { display: flex; flex-wrap: wrap; gap: 12px; align-items: flex-start; }
.row > svg { flex: none; } .row > svg.chart { width: min(100%, 610px); }
svg { max-width: 100%; height: auto; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 11px; }
th, td { border: 1px solid #ddd; padding: 2px 4px; text-align: right; white-space: nowrap; }
th { background: #f3f3f3; } td:nth-child(-n+2), th:nth-child(-n+2) { text-align: left; }
tr.self td { background: #fde8e8; font-weight: bold; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: middle; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.card { border: 1px solid #ddd; border-radius: 4px; padding: 6px 10px; font-size: 13px; }
.card b { display: block; font-size: 16px; }
pre { background: #f7f7f7; padding: 8px; font-size: 12px; overflow-x: auto; }
)";

std::string with_interval(const runtime::Interval& i, int precision, double scale = 1) {
  if (!std::isfinite(i.lo) || !std::isfinite(i.hi)) return fmt::format("{:.{}f}", scale * i.value, precision);
  return fmt::format("{:.{}f} [{:.{}f}, {:.{}f}]", scale * i.value, precision, scale * i.lo, precision, scale * i.hi,
                     precision);
}

std::string short_kind_name(RecipeKind k) {
  return k == RecipeKind::Uniform ? "uniform" : k == RecipeKind::Hand ? "hand" : k == RecipeKind::Planned ? "planned" : "?";
}

std::string eval_table(const EvalData& e) {
  // Acceptance columns only when the eval drafted (it does not with --max-prompts 0).
  const bool acceptance = std::any_of(e.rows.begin(), e.rows.end(), [](const EvalRow& r) { return r.has_acceptance; });
  std::string t = "<div class=\"scroll\"><table id=\"eval-table\"><tr><th>model</th><th>made by</th><th>size</th>"
                  "<th>bits/w</th><th>ppl</th><th>ppl/base</th><th>KL mean</th><th>KL p99</th><th>top-1 %</th>";
  t += acceptance ? "<th>accepted (greedy)</th><th>accepted (T=1)</th></tr>\n" : "</tr>\n";
  for (std::size_t i = 0; i < e.rows.size(); ++i) {
    const auto& r = e.rows[i];
    const std::string made = r.base ? "base" : (r.recipe.empty() ? "" : r.recipe + ": ") + short_kind_name(r.kind);
    t += fmt::format("<tr{}><td>{}</td><td>{}</td><td>{}</td><td>{:.2f}</td><td>{:.3f}</td>", i == e.self ? " class=\"self\"" : "",
                     xml_escape(r.name), xml_escape(made), decimal_bytes(r.stored_bytes), r.bits_per_weight,
                     r.perplexity);
    if (r.base) {
      t += acceptance ? "<td>-</td><td>-</td><td>-</td><td>-</td><td>-</td><td>-</td></tr>\n"
                      : "<td>-</td><td>-</td><td>-</td><td>-</td></tr>\n";
      continue;
    }
    auto acc = [&](const runtime::Interval& v) { return r.has_acceptance ? with_interval(v, 2) : std::string("-"); };
    t += fmt::format("<td>{}</td><td>{}</td><td>{:.4f}</td><td>{}</td>", with_interval(r.ppl_ratio, 4),
                     with_interval(r.kl_mean, 4), r.kl_p99, with_interval(r.top1, 1, 100));
    t += acceptance ? fmt::format("<td>{}</td><td>{}</td></tr>\n", acc(r.accepted_greedy), acc(r.accepted_expected))
                    : "</tr>\n";
  }
  return t + "</table></div>\n";
}

std::string outside_table(const LayerMap& map, const FormatPalette& palette) {
  std::string t = "<div class=\"scroll\"><table id=\"outside-table\"><tr><th>tensor</th><th>shape</th><th>format</th>"
                  "<th>before</th><th>after</th><th>SNR</th></tr>\n";
  for (const auto* e : map.outside)
    t += fmt::format("<tr><td>{}</td><td>[{}]</td><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td>"
                     "<td>{}</td><td>{}</td><td>{}</td></tr>\n",
                     xml_escape(e->name), fmt::join(e->shape, ", "), palette.color(e->format), xml_escape(e->format),
                     decimal_bytes(e->source_bytes), decimal_bytes(e->stored_bytes),
                     e->snr_db ? snr_text(*e->snr_db) : std::string("-"));
  return t + "</table></div>\n";
}

// Size rows by format and by module kind (the layer map's columns, then the
// weights outside the layers, then everything else: norms, biases, routers' bias...).
std::pair<std::vector<SizeBar>, std::vector<SizeBar>> size_rows(const ManifestData& m, const LayerMap& map,
                                                                const FormatPalette& palette) {
  std::map<std::string, SizeBar> fmt_rows;
  for (const auto& t : m.tensors) {
    auto& r = fmt_rows[t.format];
    r.label = t.format;
    r.color = palette.color(t.format);
    r.before += t.source_bytes;
    r.after += t.stored_bytes;
  }
  std::vector<SizeBar> by_format;
  for (auto& [f, r] : fmt_rows) by_format.push_back(r);
  std::sort(by_format.begin(), by_format.end(), [](const SizeBar& a, const SizeBar& b) { return a.before > b.before; });

  std::map<std::string, std::size_t> row_of;
  std::vector<SizeBar> by_kind;
  std::vector<std::map<std::string, std::uint64_t>> format_bytes;  // per row: format -> stored bytes
  auto row = [&](const std::string& label) -> std::size_t {
    auto [it, fresh] = row_of.emplace(label, by_kind.size());
    if (fresh) {
      by_kind.push_back({label, 0, 0, ""});
      format_bytes.emplace_back();
    }
    return it->second;
  };
  for (const auto& k : map.kinds) row(short_kind(k));
  for (const auto& t : m.tensors) {
    const std::size_t i = !t.linear ? row("norms, biases, other") : row(t.layer >= 0 ? short_kind(t.kind) : t.kind);
    by_kind[i].before += t.source_bytes;
    by_kind[i].after += t.stored_bytes;
    format_bytes[i][t.format] += t.stored_bytes;
  }
  for (std::size_t i = 0; i < by_kind.size(); ++i) {
    auto best = std::max_element(format_bytes[i].begin(), format_bytes[i].end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    by_kind[i].color = best == format_bytes[i].end() ? "#4e79a7" : palette.color(best->first);
  }
  return {by_format, by_kind};
}

}  // namespace

namespace {

// The page, section by section, in the order it reads.
class ReportBuilder {
 public:
  ReportBuilder(const std::string& dir, const ReportOptions& opt)
      : dir_(dir), opt_(opt), m_(load_manifest(dir)), map_(build_layer_map(m_)), palette_(m_.formats) {
    if (!opt.eval_path.empty()) eval_ = load_eval(opt.eval_path, dir);
    if (!opt.sensitivity_path.empty()) {
      table_ = planner::load_sensitivity(opt.sensitivity_path);
      plan_ = planner_front(opt.sensitivity_path, *table_, m_, opt.source);
    }
    for (const auto& t : m_.tensors) {
      before_ += t.source_bytes;
      after_ += t.stored_bytes;
      quantized_ += t.quantized;
    }
  }

  Report build() {
    std::string h = head();
    h += cards();
    h += layer_map_section();
    h += sizes_section();
    if (m_.gptq) h += rounding_section(*m_.gptq);
    if (!m_.calibration_expert_tokens.empty()) h += static_calibration_section();
    if (eval_) h += eval_section();
    h += front_section();
    h += footer();
    rep_.html = std::move(h);
    rep_.summary = summary();
    return std::move(rep_);
  }

 private:
  const std::string& picture(const std::string& name, std::string svg) {
    rep_.pictures.emplace_back(name, std::move(svg));
    return rep_.pictures.back().second;
  }

  std::string head() const {
    // Named by what it is (recipe and source), and by where it is only when it
    // is not inside the checkpoint: the page quantize writes must not depend on
    // the destination's name (outputs are compared byte for byte across runs).
    const std::string source_name =
        fs::path(m_.source).filename().empty() ? m_.source : fs::path(m_.source).filename().string();
    const std::string title =
        fmt::format("{} on {}", m_.recipe_name.empty() ? "(unnamed recipe)" : m_.recipe_name, source_name);
    std::string h = fmt::format("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
                                "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                                "<title>selq report: {}</title>\n<style>{}</style></head><body>\n",
                                xml_escape(title), kStyle);
    h += fmt::format("<h1>selq report: {}</h1>\n<p class=\"note\">{}recipe <b>{}</b> ({}), dialect {}, from {}</p>\n",
                     xml_escape(title), opt_.inside_checkpoint ? "" : fmt::format("checkpoint {}; ", xml_escape(dir_)),
                     xml_escape(m_.recipe_name),
                     m_.planned() ? "planned mix" : m_.quantized_formats().size() == 1 ? "uniform scheme" : "hand recipe",
                     xml_escape(m_.dialect), xml_escape(m_.source));
    return h;
  }

  std::string cards() const {
    std::string h = "<div class=\"cards\">";
    h += fmt::format("<div class=\"card\">tensors<b>{}</b>{} quantized</div>", m_.tensors.size(), quantized_);
    h += fmt::format("<div class=\"card\">layers<b>{}</b>{} module kinds</div>", m_.layers, map_.kinds.size());
    h += fmt::format("<div class=\"card\">size<b>{} &#8594; {}</b>{:.2f}x</div>", decimal_bytes(before_),
                     decimal_bytes(after_),
                     before_ ? static_cast<double>(after_) / static_cast<double>(before_) : 0.0);
    if (eval_) {
      const auto& r = eval_->rows[eval_->self];
      h += fmt::format("<div class=\"card\">bits per linear weight<b>{:.3f}</b>stored, scales included</div>",
                       r.bits_per_weight);
      h += fmt::format("<div class=\"card\">mean KL<b>{}</b>95% interval</div>", with_interval(r.kl_mean, 4));
    }
    return h + "</div>\n";
  }

  std::string layer_map_section() {
    std::string h =
        "<h2 id=\"layer-map\">Layer map</h2>\n<p class=\"note\">Layers down, module kinds across; hover a cell for "
        "the tensor, shape, format, bytes and error. Routed experts: one cell per projection for all of a layer's "
        "experts (formats side by side in proportion; error as min | median | max).</p>\n<div class=\"row\">\n";
    h += picture("layer-map-format", render_layer_map(map_, MapView::Format, palette_));
    h += picture("layer-map-error", render_layer_map(map_, MapView::Error, palette_));
    h += "</div>\n";
    // A vision tower has hundreds of weights: fold the table away beyond a screenful.
    if (!map_.outside.empty())
      h += fmt::format("<details{}><summary>Weights outside the decoder layers ({})</summary>\n{}</details>\n",
                       map_.outside.size() <= 12 ? " open" : "", map_.outside.size(), outside_table(map_, palette_));
    return h;
  }

  std::string sizes_section() {
    const auto [by_format, by_kind] = size_rows(m_, map_, palette_);
    std::string h = "<h2 id=\"sizes\">Where the bytes went</h2>\n<div class=\"row\">\n";
    h += picture("sizes-by-format", render_size_bars("bars-format", "Size by format", by_format));
    h += picture("sizes-by-kind", render_size_bars("bars-kind", "Size by module kind", by_kind));
    return h + "</div>\n";
  }

  // The calibration tokens each layer's routed experts received (a routed
  // expert sees only the tokens routed to it): how many experts, the fewest,
  // median and most, and how many no token reached (`none`: what they got instead).
  // `tokens`: per expert, or per expert linear (the largest of an expert's counts).
  static std::string expert_tokens_table(const std::map<std::string, double>& tokens, const char* none) {
    std::map<std::string, std::map<std::string, double>> by_layer;  // experts parent -> index -> tokens
    for (const auto& [module, n] : tokens)
      if (const auto e = parse_routed_expert(module)) {
        double& t = by_layer[std::string(e->experts)][std::string(e->index)];
        t = std::max(t, n);
      }
    if (by_layer.empty()) return {};
    std::string rows;
    for (const auto& [parent, experts] : by_layer) {
      std::vector<double> n;
      for (const auto& [i, t] : experts) n.push_back(t);
      std::sort(n.begin(), n.end());
      const auto none = std::count(n.begin(), n.end(), 0.0);
      rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.0f}</td><td>{:.0f}</td><td>{:.0f}</td><td>{}</td></tr>\n",
                          xml_escape(parent), n.size(), n.front(), n[n.size() / 2], n.back(),
                          none == 0 ? std::string("0") : fmt::format("<b>{}</b>", none));
    }
    return fmt::format("<details open><summary>Calibration tokens of the routed experts ({} layer(s))</summary>\n"
                       "<table><tr><th>experts</th><th>count</th><th>fewest</th><th>median</th><th>most</th>"
                       "<th>no token ({})</th></tr>\n{}</table></details>\n",
                       by_layer.size(), none, rows);
  }

  // The calibration behind static activation scales, where it reached routed experts.
  std::string static_calibration_section() const {
    return "<h2 id=\"calibration\">Static activation scales: calibration</h2>\n" +
           expert_tokens_table(m_.calibration_expert_tokens, "the layer's largest amax of the projection");
  }

  // GPTQ's calibration and, per linear, what its gate kept and measured.
  static std::string rounding_section(const GptqData& g) {
    std::string h = fmt::format(
        "<h2 id=\"rounding\">Rounding: GPTQ</h2>\n<p class=\"note\">Calibrated on {:.0f} tokens in sequences of {:.0f}: "
        "{}.</p>\n",
        g.tokens, g.context, xml_escape(g.text));
    if (!g.gated) return h + "<p class=\"note\">No gate (the run asked for none): every linear kept GPTQ's weights.</p>\n";
    h += fmt::format(
        "<p class=\"note\">The gate held {:.0f} calibration sequence(s) out of the fit and kept, per linear, GPTQ's "
        "weights or the nearest rounding on the same scales, whichever had less output error on them: "
        "<b>GPTQ on {:.0f}</b>, <b>nearest on {:.0f}</b>. Errors relative to the output's energy.</p>\n",
        g.held_out_sequences, g.kept_gptq, g.kept_nearest);
    std::string rows;
    for (const auto& e : g.modules) {
      const auto t = g.module_tokens.find(e.module);
      rows += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3g}</td><td>{:.3g}</td><td>{:.2f}</td><td>{}</td></tr>\n",
                          xml_escape(e.module), e.kept == "gptq" ? "gptq" : "<b>nearest</b>", e.gptq_error,
                          e.nearest_error, e.nearest_error > 0 ? e.gptq_error / e.nearest_error : 0.0,
                          t == g.module_tokens.end() ? std::string("-") : fmt::format("{:.0f}", t->second));
    }
    return h + expert_tokens_table(g.module_tokens, "rounded by mse") +
           fmt::format("<details{}><summary>Each linear ({})</summary>\n<table><tr><th>module</th><th>kept</th>"
                       "<th>gptq error</th><th>nearest error</th><th>gptq / nearest</th><th>tokens</th></tr>\n{}"
                       "</table></details>\n",
                       g.modules.size() <= 12 ? " open" : "", g.modules.size(), rows);
  }

  std::string eval_section() {
    std::string h =
        fmt::format("<h2 id=\"eval\">Evaluation</h2>\n<p class=\"note\">{} ({} tokens, context {}), from {}. "
                    "[lo, hi]: 95% bootstrap intervals over windows of text (acceptance: over prompts).</p>\n",
                    xml_escape(eval_->text_source), eval_->text_tokens, eval_->context, xml_escape(eval_->path));
    h += eval_table(*eval_);
    const auto& r = eval_->rows[eval_->self];
    if (!r.kl_counts.empty())
      h += picture("kl-histogram", render_histogram("kl-histogram", fmt::format("Per-position KL of {}", r.name),
                                                    "KL(base || quantized) per predicted token (log bins)",
                                                    r.kl_edges, r.kl_counts));
    else
      h += "<p class=\"note\">This eval file has no per-position KL histogram (written by an older selq).</p>\n";
    return h;
  }

  std::string front_section() {
    const auto quality = quality_chart(eval_ ? &*eval_ : nullptr, plan_ ? &*plan_ : nullptr);
    if (!quality && !plan_) return {};
    std::string h = "<h2 id=\"front\">Against the alternatives</h2>\n<div class=\"row\">\n";
    if (quality) h += picture("quality", render_svg(*quality));
    if (plan_ && plan_->tier != planner::Tier::Measured)
      h += picture("predicted-front", render_svg(predicted_front_chart(*plan_)));
    if (table_) {
      const Chart depth = depth_chart(*table_);
      if (!depth.series.empty()) h += picture("sensitivity-by-depth", render_svg(depth));
    }
    return h + "</div>\n";
  }

  std::string footer() const {
    const std::string where = opt_.inside_checkpoint ? std::string(io::kManifestName) : m_.path;
    std::string h = fmt::format("<h2 id=\"recipe\">Recipe</h2>\n<details><summary>{}</summary><pre>{}</pre></details>\n",
                                xml_escape(m_.recipe_name), xml_escape(m_.recipe_text));
    h += fmt::format("<p class=\"note\">Written by selq {} from {}.</p>\n</body></html>\n", SELQ_VERSION,
                     xml_escape(where));
    return h;
  }

  nlohmann::json summary() const {
    nlohmann::json s = {{"checkpoint", dir_},
                        {"tensors", m_.tensors.size()},
                        {"quantized", quantized_},
                        {"layers", m_.layers},
                        {"kinds", map_.kinds},
                        {"formats", palette_.colors()},
                        {"bytes_before", before_},
                        {"bytes_after", after_},
                        {"html_bytes", rep_.html.size()},
                        {"pictures", nlohmann::json::array()}};
    for (const auto& [n, svg] : rep_.pictures) s["pictures"].push_back(n);
    if (eval_) s["eval_row"] = eval_->rows[eval_->self].name;
    if (plan_) s["front_points"] = plan_->front.size();
    return s;
  }

  const std::string& dir_;
  const ReportOptions& opt_;
  const ManifestData m_;
  std::optional<EvalData> eval_;
  std::optional<planner::SensitivityTable> table_;
  std::optional<planner::TargetResult> plan_;
  const LayerMap map_;
  const FormatPalette palette_;
  std::uint64_t before_{0}, after_{0};
  std::size_t quantized_{0};
  Report rep_;
};

}  // namespace

Report build_report(const std::string& dir, const ReportOptions& opt) { return ReportBuilder(dir, opt).build(); }

void write_checkpoint_report(const std::string& dir) {
  ReportOptions opt;
  opt.inside_checkpoint = true;
  io::write_file_atomic((fs::path(dir) / pipeline::kHtmlReportName).string(), build_report(dir, opt).html);
}

bool try_write_checkpoint_report(const std::string& dir, std::string& why) {
  try {
    write_checkpoint_report(dir);
    return true;
  } catch (const Error& e) {
    why = e.what();
    return false;
  }
}

}  // namespace selq::report
