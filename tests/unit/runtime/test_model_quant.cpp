// Quantized checkpoints written by `selq quantize` (all three dialects) load
// in the runtime as the engines resolve them: each linear gets the recipe's
// scheme, its weight equals the scheme's dequantization of what quantize
// wrote, its activation mode is the recipe's, and the logits stay close to
// the unquantized model's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "core/codecs.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"
#include "runtime/model/llama.h"
#include "test_model_util.h"

namespace selq::runtime {
namespace {

std::string tmpdir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("selq_rtq_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

struct Case {
  const char* name;
  const char* yaml;
  const char* o_proj_scheme;  // SchemeSpec::name() expected for o_proj
  const char* other_scheme;   // for the other projections
  quant::ActMode o_act, other_act;
  double max_rel_err;         // weight reconstruction bound for the scheme
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class QuantLoad : public ::testing::TestWithParam<Case> {};

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    e += (a[i] - b[i]) * (a[i] - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(e / n);
}

TEST_P(QuantLoad, LinearsResolveAndDequantize) {
  const Case& c = GetParam();
  testing::TinyLlama cfg;
  cfg.qkv_bias = true;  // Qwen2-like: biases and an untied head
  const std::string src = tmpdir(std::string(c.name) + "_src"), dst = tmpdir(std::string(c.name) + "_dst");
  auto w = testing::write_tiny_llama(src, cfg, true);
  auto recipe = recipe::parse_recipe(c.yaml, std::string(c.name) + ".yaml");
  auto ck = io::Checkpoint::open(src);
  auto plan = pipeline::make_plan(*ck, recipe);
  pipeline::QuantizeOptions qo;
  qo.threads = 1;
  pipeline::run_quantize(*ck, plan, recipe, dst, qo);

  auto base = LlamaModel::load(src);
  auto q = LlamaModel::load(dst);
  auto qck = io::Checkpoint::open(dst);
  EXPECT_FALSE(q->dialect().empty());
  // `selq eval` and `selq plan` count bits per linear weight alike.
  EXPECT_NEAR(q->linear_bits_per_weight(), plan.bits_per_weight(), 1e-12);
  EXPECT_LT(q->linear_bits_per_weight(), 15.0);
  EXPECT_EQ(base->linear_bits_per_weight(), 16.0);  // biases are not weights (recipe::owning_module)
  for (std::size_t li = 0; li < q->layers().size(); ++li) {
    const auto& L = q->layers()[li];
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
      const bool is_o = l == &L.o;
      EXPECT_EQ(l->scheme, is_o ? c.o_proj_scheme : c.other_scheme) << l->module;
      EXPECT_EQ(l->act, is_o ? c.o_act : c.other_act) << l->module;
      const auto& orig = w.at(l->module + ".weight");
      ASSERT_EQ(l->weight.size(), orig.size()) << l->module;
      EXPECT_LT(rel_err(l->weight.to_f32(), orig), is_o && std::string(c.o_proj_scheme) == "bf16" ? 1e-9 : c.max_rel_err)
          << l->module;
      EXPECT_GT(l->stored_bits, 0);
      // How the runtime holds it (runtime/model/matrix.h): FP8 as its two stored
      // factors, E4M3 values in BF16 times the row's scale, whose product is
      // the dequantized value bit for bit; MXFP4 (E2M1 x 2^k) exactly BF16.
      const std::string scheme = l->scheme;
      if (scheme == "fp8-channel") {
        ASSERT_TRUE(l->weight.is_bf16() && l->weight.row_scale.size() == static_cast<std::size_t>(l->out))
            << l->module;
        auto codes = qck->view(l->module + ".weight");
        auto scales = qck->view(l->module + ".weight_scale");
        ASSERT_EQ(codes.info->dtype, DType::F8_E4M3) << l->module;
        const auto got = l->weight.to_f32();
        for (std::int64_t r = 0; r < l->out; ++r)
          for (std::int64_t k = 0; k < l->in; ++k) {
            const float want = e4m3_to_f32(codes.bytes[static_cast<std::size_t>(r * l->in + k)]) *
                               load_float_element(scales.info->dtype, scales.bytes.data(), static_cast<std::uint64_t>(r));
            ASSERT_EQ(std::memcmp(&want, &got[static_cast<std::size_t>(r * l->in + k)], 4), 0)
                << l->module << " [" << r << ", " << k << "]";
          }
      } else if (scheme == "mxfp4" || scheme == "BF16") {
        EXPECT_TRUE(l->weight.is_bf16() && l->weight.row_scale.empty()) << l->module;
      }
    }
  }
  std::vector<std::int32_t> toks{3, 14, 15, 9, 26, 53, 58, 9, 7, 9};
  auto a = base->forward(toks), b = q->forward(toks);
  EXPECT_LT(rel_err(b, a), 0.8) << "quantized logits far from the base's";  // W4A4 MXFP4 on random weights: ~0.57
  EXPECT_GT(rel_err(b, a), 0.0) << "quantization changed nothing";

  // Held as stored and dequantized where used (runtime/model/stored_weight.h): the same logits, bit for bit.
  ::setenv("SELQ_RUNTIME_WEIGHTS", "stored", 1);
  auto qs = LlamaModel::load(dst);
  ::unsetenv("SELQ_RUNTIME_WEIGHTS");
  for (const Linear* l : qs->linears()) {
    const std::string scheme = l->scheme;
    if (scheme.starts_with("nvfp4") || scheme.starts_with("mxfp")) {
      EXPECT_TRUE(l->weight.is_stored()) << l->module;
    } else if (scheme == "fp8-channel" || scheme == "BF16") {
      EXPECT_FALSE(l->weight.is_stored()) << l->module;
    }
  }
  const auto bs = qs->forward(toks);
  ASSERT_EQ(bs.size(), b.size());
  EXPECT_EQ(0, std::memcmp(bs.data(), b.data(), b.size() * sizeof(float)));
  std::filesystem::remove_all(src);
  std::filesystem::remove_all(dst);
}

// NVFP4 activations with a calibrated (static) global scale: each dialect
// names and encodes the input scale its own way (compressed-tensors'
// input_global_scale = 448*6/amax, ModelOpt's and Quark's input_scale =
// amax/(448*6)); the runtime must read back the scale the kernel takes.
TEST(StaticActivationLoad, EveryDialectGivesTheKernelItsCalibratedScale) {
  for (const char* dialect : {"compressed-tensors", "quark", "modelopt"}) {
    SCOPED_TRACE(dialect);
    testing::TinyLlama cfg;
    const std::string src = tmpdir(std::string("static_src_") + dialect), dst = tmpdir(std::string("static_dst_") + dialect);
    auto w = testing::write_tiny_llama(src, cfg, true);
    auto recipe = recipe::parse_recipe(std::string("name: s\narch: llama\ndialect: ") + dialect +
                                           "\ndefault: {scheme: nvfp4, options: {activations: nvfp4}}\n",
                                       "static.yaml");
    pipeline::PlanOptions po;
    po.calibration_path = "calib.json";
    float next = 0.5f;
    for (const auto& [tensor, values] : w)
      if (tensor.find(".layers.") != std::string::npos && tensor.ends_with(".weight"))
        po.activation_amax[tensor.substr(0, tensor.size() - 7)] = (next += 0.75f);
    auto ck = io::Checkpoint::open(src);
    auto plan = pipeline::make_plan(*ck, recipe, po);
    pipeline::run_quantize(*ck, plan, recipe, dst);
    auto q = LlamaModel::load(dst);
    int checked = 0;
    for (const auto& L : q->layers())
      for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) {
        ASSERT_EQ(l->act, quant::ActMode::NVFP4) << l->module;
        const float amax = po.activation_amax.at(l->module);
        EXPECT_FLOAT_EQ(l->act_static_scale, quant::static_scale_for_amax(quant::ActMode::NVFP4, amax)) << l->module;
        ++checked;
      }
    EXPECT_EQ(checked, 7 * static_cast<int>(q->layers().size()));
    std::filesystem::remove_all(src);
    std::filesystem::remove_all(dst);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Dialects, QuantLoad,
    ::testing::Values(
        Case{"quark_mix",
             "name: mix\narch: llama\ndialect: quark\nrules:\n"
             "  - match: \"model.layers.*.self_attn.o_proj\"\n    scheme: mxfp4\n"
             "    options: {activations: mxfp4-dynamic}\n"
             "  - match: [\"@attention\", \"@mlp\"]\n    scheme: fp8-channel\n"
             "    options: {activations: fp8-per-token}\ndefault: null\n",
             "mxfp4", "fp8-channel", quant::ActMode::MXFP4Dynamic, quant::ActMode::FP8PerToken, 0.2},
        Case{"ct_fp8", "name: f\narch: llama\ndialect: compressed-tensors\ndefault:\n  scheme: fp8-channel\n"
                       "  options: {activations: fp8-per-token}\n",
             "fp8-channel", "fp8-channel", quant::ActMode::FP8PerToken, quant::ActMode::FP8PerToken, 0.05},
        Case{"ct_nvfp4", "name: n\narch: llama\ndialect: compressed-tensors\ndefault:\n  scheme: nvfp4\n"
                         "  options: {activations: none}\n",
             "nvfp4", "nvfp4", quant::ActMode::None, quant::ActMode::None, 0.2},
        Case{"modelopt_nvfp4", "name: n\narch: llama\ndialect: modelopt\ndefault:\n  scheme: nvfp4\n"
                               "  options: {activations: none}\n",
             "nvfp4-modelopt", "nvfp4-modelopt", quant::ActMode::None, quant::ActMode::None, 0.2},
        Case{"quark_mxfp4", "name: m\narch: llama\ndialect: quark\ndefault:\n  scheme: mxfp4\n"
                            "  options: {scale_rule: even, activations: mxfp4-dynamic}\n",
             "mxfp4", "mxfp4", quant::ActMode::MXFP4Dynamic, quant::ActMode::MXFP4Dynamic, 0.2}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace selq::runtime
