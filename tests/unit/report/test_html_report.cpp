// The HTML report of checkpoints quantized in the test: a small Llama with a
// mixed recipe and a Kimi-K3-shaped MoE; the layer map's rows and cells, the
// colours of known cells, the eval and sensitivity sections, and the one-line
// errors for bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/manifest.h"
#include "pipeline/quantize.h"
#include "pipeline/synth.h"
#include "planner/sensitivity.h"
#include "recipe/recipe.h"
#include "report/html_report.h"
#include "report/layer_map.h"
#include "report/palette.h"

namespace fs = std::filesystem;
using namespace selq;

namespace {

std::size_t count(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// The fill of the element with this id (a single-format cell is one <rect>).
std::string fill_of(const std::string& html, const std::string& id) {
  const std::regex re("id=\"" + std::regex_replace(id, std::regex(R"([.*])"), R"(\$&)") + "\"[^>]*fill=\"(#[0-9a-f]{6})\"");
  std::smatch m;
  return std::regex_search(html, m, re) ? m[1].str() : "";
}

void quantize(const fs::path& src, const fs::path& dst, const std::string& yaml) {
  const auto recipe = recipe::parse_recipe(yaml, "test.yaml");
  auto ck = io::Checkpoint::open(src.string());
  auto plan = pipeline::make_plan(*ck, recipe);
  pipeline::QuantizeOptions qo;
  qo.overwrite = true;
  pipeline::run_quantize(*ck, plan, recipe, dst.string(), qo);
}

constexpr const char* kLlamaMix = R"(name: test-mix
arch: llama
dialect: compressed-tensors
rules:
  - match: "model.layers.*.self_attn.o_proj"
    scheme: mxfp4
  - match: "model.layers.0.mlp.*"
    scheme: nvfp4
  - match: ["@attention", "@mlp"]
    scheme: fp8-channel
default: null
)";

class ReportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / fmt::format("selq-report-{}", ::getpid());
    fs::remove_all(dir_);
    pipeline::SynthOptions o;
    o.scale = 4;
    o.layers = 3;
    o.vocab = 256;
    pipeline::write_synth_checkpoint(o, (dir_ / "llama").string());
    quantize(dir_ / "llama", dir_ / "mix", kLlamaMix);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static inline fs::path dir_;
};

TEST_F(ReportTest, LayerMapHasEveryLayerAndColoursCellsByFormat) {
  const auto rep = report::build_report((dir_ / "mix").string());
  const std::string& h = rep.html;
  EXPECT_EQ(h.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(h.find("<script"), std::string::npos);  // self-contained, no scripts
  EXPECT_NE(h.find("recipe <b>test-mix</b> (hand recipe)"), std::string::npos);
  EXPECT_EQ(h.find("http://", h.find("<body")), h.find("http://www.w3.org/2000/svg", h.find("<body")));
  for (int l = 0; l < 3; ++l) EXPECT_EQ(count(h, fmt::format("class=\"layer\" data-layer=\"{}\"", l)), 2u) << l;
  EXPECT_EQ(count(h, "class=\"layer\""), 6u);
  const report::FormatPalette palette({"fp8-channel", "mxfp4", "nvfp4", "unquantized"});
  EXPECT_EQ(fill_of(h, "fmt-L1-self_attn.o_proj"), palette.color("mxfp4"));
  EXPECT_EQ(fill_of(h, "fmt-L0-mlp.down_proj"), palette.color("nvfp4"));
  EXPECT_EQ(fill_of(h, "fmt-L2-self_attn.q_proj"), palette.color("fp8-channel"));
  EXPECT_NE(palette.color("mxfp4"), palette.color("nvfp4"));
  EXPECT_NE(palette.color("nvfp4"), palette.color("fp8-channel"));
  // The error view draws the same cells; hover text names the tensor.
  EXPECT_NE(h.find("id=\"snr-L2-mlp.up_proj\""), std::string::npos);
  EXPECT_NE(h.find("model.layers.2.mlp.up_proj.weight\nshape ["), std::string::npos);
  // Sizes by format and kind; lm_head is tied, so the embedding is the one weight outside the layers.
  EXPECT_NE(h.find("id=\"bars-format\""), std::string::npos);
  EXPECT_NE(h.find("id=\"bars-kind\""), std::string::npos);
  EXPECT_NE(h.find("model.embed_tokens.weight"), std::string::npos);
  EXPECT_EQ(rep.summary["layers"], 3);
  // quantize itself does not write the page here (the CLI does); write_checkpoint_report does.
  report::write_checkpoint_report((dir_ / "mix").string());
  EXPECT_TRUE(fs::is_regular_file(dir_ / "mix" / pipeline::kHtmlReportName));
  // The page inside a checkpoint does not depend on where the checkpoint is (outputs compare byte for byte).
  fs::copy(dir_ / "mix", dir_ / "mix-moved");
  report::write_checkpoint_report((dir_ / "mix-moved").string());
  EXPECT_EQ(io::read_file((dir_ / "mix" / pipeline::kHtmlReportName).string()),
            io::read_file((dir_ / "mix-moved" / pipeline::kHtmlReportName).string()));
  EXPECT_EQ(h.find("<h1>selq report: test-mix on llama</h1>") != std::string::npos, true);
}

TEST_F(ReportTest, SensitivityGivesTheFrontAndDepthCharts) {
  auto ck = io::Checkpoint::open((dir_ / "llama").string());
  const auto layout = planner::decision_units(*ck, exporter::Dialect::CompressedTensors);
  const auto table = planner::data_free_sensitivity(
      *ck, layout, planner::select_candidates({"fp8-w8a8", "nvfp4-w4a16"}, planner::Hardware::Any,
                                              exporter::Dialect::CompressedTensors));
  io::write_file_atomic((dir_ / "sens.json").string(), table.to_json().dump());
  report::ReportOptions opt;
  opt.sensitivity_path = (dir_ / "sens.json").string();
  opt.source = (dir_ / "llama").string();
  const auto rep = report::build_report((dir_ / "mix").string(), opt);
  EXPECT_NE(rep.html.find("id=\"chart-predicted\""), std::string::npos);
  EXPECT_NE(rep.html.find("id=\"chart-depth\""), std::string::npos);
  EXPECT_NE(rep.html.find("Sensitivity by depth under nvfp4-w4a16"), std::string::npos);
  // A table of another checkpoint is refused by the planner, naming it.
  pipeline::SynthOptions o;
  o.scale = 4;
  o.layers = 2;
  o.vocab = 256;
  pipeline::write_synth_checkpoint(o, (dir_ / "other").string());
  opt.source = (dir_ / "other").string();
  EXPECT_THROW(report::build_report((dir_ / "mix").string(), opt), Error);
  // A table made from that other checkpoint does not describe this one.
  auto other = io::Checkpoint::open((dir_ / "other").string());
  const auto other_table = planner::data_free_sensitivity(
      *other, planner::decision_units(*other, exporter::Dialect::CompressedTensors),
      planner::select_candidates({"fp8-w8a8"}, planner::Hardware::Any, exporter::Dialect::CompressedTensors));
  io::write_file_atomic((dir_ / "sens-other.json").string(), other_table.to_json().dump());
  opt.sensitivity_path = (dir_ / "sens-other.json").string();
  opt.source = (dir_ / "llama").string();
  try {
    report::build_report((dir_ / "mix").string(), opt);
    FAIL() << "a table of another checkpoint was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
  }
}

TEST_F(ReportTest, EvalSectionFindsTheRowOrRefusesAnotherModel) {
  // An eval file as `selq eval --json` writes it, for this checkpoint and one more.
  auto model = [&](const std::string& path, double kl) {
    nlohmann::json iv = {{"value", kl}, {"lo", kl * 0.9}, {"hi", kl * 1.1}};
    return nlohmann::json{{"path", path}, {"stored_bytes", 1000}, {"linear_bits_per_weight", 6.5},
                          {"perplexity", 12.0}, {"kl_p99", 10 * kl}, {"spec_steps", 0},
                          {"intervals", {{"text", {{"kl_mean", iv}, {"ppl_ratio", iv}, {"same_top_p", iv}}}}},
                          {"kl_histogram", {{"edges", {0, 1e-3, 1e-2, 1e-1}}, {"counts", {5, 20, 3}}}}};
  };
  nlohmann::json base = {{"path", (dir_ / "llama").string()}, {"stored_bytes", 2000},
                         {"linear_bits_per_weight", 16.0}, {"perplexity", 11.0}};
  nlohmann::json ev = {{"text_source", "t"}, {"text_tokens", 1024}, {"context", 128}, {"base", base},
                       {"quantized", {model((dir_ / "elsewhere").string(), 0.05), model((dir_ / "mix").string(), 0.02)}}};
  io::write_file_atomic((dir_ / "eval.json").string(), ev.dump());
  report::ReportOptions opt;
  opt.eval_path = (dir_ / "eval.json").string();
  const auto rep = report::build_report((dir_ / "mix").string(), opt);
  EXPECT_NE(rep.html.find("id=\"eval-table\""), std::string::npos);
  EXPECT_EQ(count(rep.html, "<tr class=\"self\"><td>mix</td>"), 1u);
  EXPECT_NE(rep.html.find("0.0200 [0.0180, 0.0220]"), std::string::npos);
  EXPECT_NE(rep.html.find("id=\"kl-histogram\""), std::string::npos);
  EXPECT_NE(rep.html.find("id=\"chart-quality\""), std::string::npos);
  EXPECT_NE(rep.html.find(">this mix</text>"), std::string::npos);

  ev["quantized"] = {model((dir_ / "elsewhere").string(), 0.05)};
  io::write_file_atomic((dir_ / "eval-other.json").string(), ev.dump());
  opt.eval_path = (dir_ / "eval-other.json").string();
  try {
    report::build_report((dir_ / "mix").string(), opt);
    FAIL() << "an eval of another model was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("eval-other.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find("another model"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

TEST_F(ReportTest, ManifestWithoutMetricsIsOneClearLine) {
  const fs::path copy = dir_ / "no-metrics";
  fs::create_directories(copy);
  auto j = nlohmann::json::parse(io::read_file((dir_ / "mix" / io::kManifestName).string()));
  std::string victim;
  for (auto& t : j["tensors"])
    if (t.contains("metrics")) {
      t.erase("metrics");
      victim = t["source"];
      break;
    }
  io::write_file_atomic((copy / io::kManifestName).string(), j.dump());
  try {
    report::build_report(copy.string());
    FAIL() << "a manifest without metrics was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(victim), std::string::npos) << msg;
    EXPECT_NE(msg.find("no error metrics"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_THROW(report::build_report((dir_ / "llama").string()), Error);  // no manifest at all
  const std::string text = io::read_file((dir_ / "mix" / io::kManifestName).string());
  io::write_file_atomic((copy / io::kManifestName).string(), text.substr(0, text.size() / 2));
  try {
    report::build_report(copy.string());
    FAIL() << "a truncated manifest was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON at byte"), std::string::npos) << e.what();
  }
}

TEST(ReportMoe, ExpertsOfALayerShareACellPerProjection) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-report-moe-{}", ::getpid());
  fs::remove_all(dir);
  pipeline::SynthOptions o;
  o.arch = "kimi-k3";
  o.scale = 64;
  o.layers = 3;
  o.experts = 12;
  pipeline::write_synth_checkpoint(o, (dir / "src").string());
  quantize(dir / "src", dir / "q", R"(name: moe-mix
arch: kimi-k3
dialect: compressed-tensors
rules:
  - match: "@experts"
    scheme: nvfp4
  - match: ["@attention", "@shared_experts", "@dense_mlp"]
    scheme: fp8-channel
default: null
)");
  const auto m = report::load_manifest((dir / "q").string());
  const auto map = report::build_layer_map(m);
  EXPECT_EQ(map.layers, 3);
  const auto col = std::find(map.kinds.begin(), map.kinds.end(), "mlp.experts.*.up_proj") - map.kinds.begin();
  ASSERT_LT(static_cast<std::size_t>(col), map.kinds.size());
  EXPECT_TRUE(map.cells[0][col].empty());  // layer 0 is dense
  EXPECT_EQ(map.cells[1][col].size(), 12u);
  // Attention columns come before the experts'.
  EXPECT_LT(std::find(map.kinds.begin(), map.kinds.end(), "self_attn.q_a_proj") - map.kinds.begin(), col);
  const auto rep = report::build_report((dir / "q").string());
  EXPECT_NE(rep.html.find("layer 2 mlp.experts.*.up_proj (12 experts)"), std::string::npos);
  EXPECT_NE(rep.html.find("format nvfp4 x12"), std::string::npos);
  EXPECT_NE(rep.html.find("SNR min "), std::string::npos);
  const report::FormatPalette palette(m.formats);
  EXPECT_EQ(fill_of(rep.html, "fmt-L2-mlp.experts.*.down_proj"), palette.color("nvfp4"));
  EXPECT_EQ(fill_of(rep.html, "fmt-L0-mlp.gate_proj"), palette.color("fp8-channel"));
  fs::remove_all(dir);
}

TEST(ReportPalette, FamiliesAndScale) {
  const report::FormatPalette p({"fp8-channel", "fp8-block128", "nvfp4", "unquantized"});
  EXPECT_NE(p.color("fp8-channel"), p.color("fp8-block128"));
  EXPECT_EQ(report::viridis(0, 0, 10), "#440154");
  EXPECT_EQ(report::viridis(10, 0, 10), "#fde725");
  EXPECT_EQ(report::viridis(99, 0, 10), "#fde725");  // clamped
  EXPECT_EQ(report::short_kind("mlp.experts.*.up_proj"), "experts.up_proj");
  EXPECT_EQ(report::snr_text(std::numeric_limits<double>::infinity()), "exact");
}

}  // namespace

// A gptq run's manifest: the report says what the calibration was and, per
// linear, what the gate kept with both errors; without gptq_calibration no section.
TEST_F(ReportTest, RoundingSectionShowsTheGatesChoices) {
  EXPECT_EQ(report::build_report((dir_ / "mix").string()).html.find("id=\"rounding\""), std::string::npos);
  const fs::path gated = dir_ / "gated";
  fs::remove_all(gated);
  fs::copy(dir_ / "mix", gated);
  const auto path = gated / io::kManifestName;
  auto m = nlohmann::json::parse(io::read_file(path.string()));
  m["gptq_calibration"] = {
      {"text", "a mix of <3> texts"}, {"tokens", 4096}, {"context", 512},
      {"gate", {{"held_out_sequences", 1}, {"kept_gptq", 1}, {"kept_nearest", 1}, {"rule", "r"},
                {"modules", {{"model.layers.0.mlp.down_proj", {{"kept", "nearest"}, {"gptq_error", 0.02}, {"nearest_error", 0.01}, {"held_out_rows", 512}}},
                             {"model.layers.0.mlp.up_proj", {{"kept", "gptq"}, {"gptq_error", 0.005}, {"nearest_error", 0.01}, {"held_out_rows", 512}}}}}}},
      {"module_tokens", {{"model.layers.0.mlp.down_proj", 4096}, {"model.layers.0.mlp.up_proj", 4096},
                         {"model.layers.1.mlp.experts.0.up_proj", 700}, {"model.layers.1.mlp.experts.0.down_proj", 700},
                         {"model.layers.1.mlp.experts.1.up_proj", 0}, {"model.layers.1.mlp.experts.2.up_proj", 90}}}};
  io::write_file_atomic(path.string(), m.dump());
  const std::string h = report::build_report(gated.string()).html;
  EXPECT_NE(h.find("Calibrated on 4096 tokens in sequences of 512: a mix of &lt;3&gt; texts."), std::string::npos);
  EXPECT_NE(h.find("<b>GPTQ on 1</b>, <b>nearest on 1</b>"), std::string::npos);
  EXPECT_NE(h.find("<tr><td>model.layers.0.mlp.down_proj</td><td><b>nearest</b></td><td>0.02</td><td>0.01</td><td>2.00</td><td>4096</td></tr>"),
            std::string::npos);
  EXPECT_NE(h.find("<tr><td>model.layers.0.mlp.up_proj</td><td>gptq</td><td>0.005</td><td>0.01</td><td>0.50</td><td>4096</td></tr>"),
            std::string::npos);
  // Three routed experts of layer 1: 0, 90 and 700 tokens, one reached by none.
  EXPECT_NE(h.find("<tr><td>model.layers.1.mlp.experts</td><td>3</td><td>0</td><td>90</td><td>700</td><td><b>1</b></td></tr>"),
            std::string::npos);
}
