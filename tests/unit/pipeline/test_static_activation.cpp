// Static activation scales: a recipe whose scheme quantizes activations with a
// static scale (FP8 static, NVFP4 W4A4) needs `selq calibrate` output, and the
// calibrated amax becomes the dialect's input scale tensor.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/codecs.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "pipeline/calibration.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;
using namespace selq;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / fmt::format("selq-static-act-{}-{}", ::getpid(), counter()++);
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

// Two BF16 linears of a one-layer llama-like model.
std::string write_checkpoint(const fs::path& dir) {
  fs::create_directories(dir);
  const std::vector<std::string> modules = {"model.layers.0.self_attn.o_proj", "model.layers.0.mlp.down_proj"};
  std::vector<TensorInfo> infos;
  for (const auto& m : modules) infos.push_back({m + ".weight", DType::BF16, {32, 64}});
  io::SafetensorsWriter w((dir / "model.safetensors").string(), infos);
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const auto& i : infos) {
    std::vector<std::uint16_t> v(32 * 64);
    for (auto& x : v) x = f32_to_bf16_ref(nd(rng));
    w.write(i.name, {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * 2});
  }
  w.commit();
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
  return dir.string();
}

recipe::Recipe recipe_with(const std::string& scheme, const std::string& acts, const std::string& dialect) {
  return recipe::parse_recipe(fmt::format("name: t\narch: llama\ndialect: {}\ndefault:\n  scheme: {}\n"
                                          "  options: {{activations: {}}}\n",
                                          dialect, scheme, acts),
                              "test.yaml");
}

pipeline::PlanOptions calibrated(std::map<std::string, float> amax) {
  pipeline::PlanOptions o;
  o.activation_amax = std::move(amax);
  o.calibration_path = "calib.json";
  return o;
}

const std::map<std::string, float> kAmax = {{"model.layers.0.self_attn.o_proj", 12.5f},
                                            {"model.layers.0.mlp.down_proj", 3.0f}};

float read_f32(const io::Checkpoint& ck, const std::string& name) {
  auto v = ck.view(name);
  float f = 0;
  EXPECT_EQ(v.bytes.size(), 4u) << name;
  std::memcpy(&f, v.bytes.data(), 4);
  return f;
}

}  // namespace

TEST(StaticActivation, PlanWithoutCalibrationSaysHowToGetOne) {
  TempDir t;
  auto ck = io::Checkpoint::open(write_checkpoint(t.path));
  try {
    pipeline::make_plan(*ck, recipe_with("nvfp4", "nvfp4", "compressed-tensors"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("needs a calibration"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint(), ErrorHint::CalibrationFile);  // the CLI and Python name their option
    EXPECT_NE(std::string(e.what()).find("test.yaml"), std::string::npos) << e.what();
  }
}

TEST(StaticActivation, MissingModuleInCalibrationIsNamed) {
  TempDir t;
  auto ck = io::Checkpoint::open(write_checkpoint(t.path));
  try {
    pipeline::make_plan(*ck, recipe_with("fp8-channel", "fp8-static", "compressed-tensors"),
                        calibrated({{"model.layers.0.self_attn.o_proj", 1.0f}}));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.layers.0.mlp.down_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("calib.json"), std::string::npos) << e.what();
  }
}

TEST(StaticActivation, DynamicSchemesIgnoreTheCalibration) {
  TempDir t;
  auto ck = io::Checkpoint::open(write_checkpoint(t.path));
  auto plan = pipeline::make_plan(*ck, recipe_with("fp8-channel", "fp8-per-token", "compressed-tensors"),
                                  calibrated(kAmax));
  for (const auto& pt : plan.tensors) {
    EXPECT_FALSE(pt.input_amax);
    for (const auto& o : pt.outputs) EXPECT_EQ(o.info.name.find("input_"), std::string::npos) << o.info.name;
  }
}

// The stored input scale per dialect convention, from the quantized files.
TEST(StaticActivation, QuantizeWritesTheDialectsInputScale) {
  struct Case {
    std::string scheme, acts, dialect, suffix;
    DType dtype;
    Shape shape;
    float (*expected)(float amax);
  };
  const std::vector<Case> cases = {
      {"nvfp4", "nvfp4", "compressed-tensors", "input_global_scale", DType::F32, {1},
       [](float a) { return 2688.0f / a; }},
      {"nvfp4", "nvfp4", "modelopt", "input_scale", DType::F32, {}, [](float a) { return a / 2688.0f; }},
      {"fp8-channel", "fp8-static", "quark", "input_scale", DType::F32, {1}, [](float a) { return a / 448.0f; }},
      // compressed-tensors keeps FP8 scales in the model dtype.
      {"fp8-channel", "fp8-static", "compressed-tensors", "input_scale", DType::BF16, {1},
       [](float a) { return bf16_to_f32(f32_to_bf16_ref(a / 448.0f)); }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.scheme + "/" + c.acts + "/" + c.dialect);
    TempDir t;
    auto ck = io::Checkpoint::open(write_checkpoint(t.path / "src"));
    auto recipe = recipe_with(c.scheme, c.acts, c.dialect);
    auto plan = pipeline::make_plan(*ck, recipe, calibrated(kAmax));
    const std::string dst = (t.path / "dst").string();
    pipeline::QuantizeOptions qo;
    pipeline::run_quantize(*ck, plan, recipe, dst, qo);
    auto out = io::Checkpoint::open(dst);
    for (const auto& [module, amax] : kAmax) {
      const auto* info = out->find(module + "." + c.suffix);
      ASSERT_NE(info, nullptr) << module << "." << c.suffix;
      EXPECT_EQ(info->info.dtype, c.dtype);
      EXPECT_EQ(info->info.shape, c.shape);
      auto v = out->view(module + "." + c.suffix);
      const float got = c.dtype == DType::F32 ? read_f32(*out, module + "." + c.suffix)
                                              : bf16_to_f32(static_cast<std::uint16_t>(v.bytes[0] | (v.bytes[1] << 8)));
      EXPECT_EQ(got, c.expected(amax)) << module;
    }
  }
}

// The runtime reads a stored input scale back through static_scale_from_stored:
// in every convention it must give the scale the activation kernel takes.
TEST(StaticActivation, StoredScaleDecodesToTheKernelsScale) {
  using quant::ActMode;
  quant::SchemeSpec ct_nvfp4, modelopt_nvfp4, fp8_static;
  ct_nvfp4.kind = modelopt_nvfp4.kind = quant::SchemeKind::NVFP4;
  ct_nvfp4.act = modelopt_nvfp4.act = ActMode::NVFP4;
  ct_nvfp4.nvfp = quant::NvfpConvention::CompressedTensors;
  modelopt_nvfp4.nvfp = quant::NvfpConvention::ModelOpt;
  fp8_static.kind = quant::SchemeKind::FP8Channel;
  fp8_static.act = ActMode::FP8StaticTensor;
  fp8_static.scale_dtype = DType::F32;
  for (const auto* spec : {&ct_nvfp4, &modelopt_nvfp4, &fp8_static}) {
    SCOPED_TRACE(spec->name());
    for (const float amax : {0.01f, 3.0f, 12.5f, 4096.0f}) {
      float stored = 0;
      quant::encode_activation_scale(*spec, amax, {reinterpret_cast<std::uint8_t*>(&stored), 4});
      EXPECT_FLOAT_EQ(quant::static_scale_from_stored(*spec, stored), quant::static_scale_for_amax(spec->act, amax))
          << amax;
    }
  }
  EXPECT_EQ(quant::static_scale_for_amax(ActMode::NVFP4, 2688.0f), 1.0f);
  EXPECT_EQ(quant::static_scale_for_amax(ActMode::FP8StaticTensor, 448.0f), 1.0f);
}

TEST(StaticActivation, CalibrationFileErrorsNameTheFileAndModule) {
  TempDir t;
  auto write = [&](const std::string& text) {
    const auto p = (t.path / "c.json").string();
    std::ofstream(p) << text;
    return p;
  };
  EXPECT_THROW(pipeline::load_activation_amax((t.path / "absent.json").string()), Error);
  EXPECT_THROW(pipeline::load_activation_amax(write("{not json")), Error);
  EXPECT_THROW(pipeline::load_activation_amax(write(R"({"format": "other", "activation_amax": {}})")), Error);
  try {
    pipeline::load_activation_amax(
        write(R"({"format": "selq-calibration-v1", "activation_amax": {"a.b": 1.5, "m.q_proj": -2}})"));
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("m.q_proj"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
  }
  auto ok = pipeline::load_activation_amax(
      write(R"({"format": "selq-calibration-v1", "activation_amax": {"a.b": 1.5, "c.d": 40}})"));
  EXPECT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok.at("c.d"), 40.0f);
}
