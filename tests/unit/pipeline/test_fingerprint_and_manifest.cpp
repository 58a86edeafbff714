// What a quantize run writes about its plan and results without building a
// JSON tree: the plan fingerprint (it decides whether a run may resume from a
// journal: "two runs with equal fingerprints write equal bytes"; built field
// by field, so every field that decides the output must be checked to reach
// it) and the manifest text.
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/codecs.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "pipeline/journal.h"
#include "pipeline/manifest.h"
#include "pipeline/plan.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;
using namespace selq;

namespace {

// One llama layer's attention: q/k/v (an NVFP4 fused group) and o.
std::string write_checkpoint(const fs::path& dir) {
  fs::create_directories(dir);
  std::vector<TensorInfo> infos;
  for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"})
    infos.push_back({fmt::format("model.layers.0.self_attn.{}.weight", p), DType::BF16, {32, 64}});
  infos.push_back({"model.norm.weight", DType::BF16, {64}});
  io::SafetensorsWriter w((dir / "model.safetensors").string(), infos);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  for (const auto& i : infos) {
    std::vector<std::uint16_t> v(static_cast<std::size_t>(shape_numel(i.shape)));
    for (auto& x : v) x = f32_to_bf16_ref(nd(rng));
    w.write(i.name, {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * 2});
  }
  w.commit();
  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
  return dir.string();
}

TEST(PlanFingerprint, EveryFieldThatDecidesTheBytesChangesIt) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-fingerprint-{}", ::getpid());
  fs::remove_all(dir);
  auto ck = io::Checkpoint::open(write_checkpoint(dir / "ckpt"));
  const auto recipe = recipe::parse_recipe(
      "name: t\narch: llama\ndialect: compressed-tensors\ndefault:\n  scheme: nvfp4\n"
      "  options: {activations: none}\n",
      "test.yaml");
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  fs::remove_all(dir);

  // A quantized member of the fused group, with its outputs.
  std::size_t q = plan.tensors.size();
  for (std::size_t i = 0; i < plan.tensors.size(); ++i)
    if (!plan.tensors[i].fused_group.empty()) q = i;
  ASSERT_LT(q, plan.tensors.size());
  ASSERT_TRUE(plan.tensors[q].scheme);
  ASSERT_GE(plan.tensors[q].outputs.size(), 2u);
  ASSERT_FALSE(plan.shards.empty());
  ASSERT_GE(plan.shards[0].tensors.size(), 2u);
  ASSERT_FALSE(plan.linear_modules.empty());

  const std::string base = pipeline::plan_fingerprint(plan, recipe);
  EXPECT_EQ(pipeline::plan_fingerprint(plan, recipe), base) << "not deterministic";
  {
    // The same headers read from elsewhere (in place: a saved copy) are the same plan.
    pipeline::Plan moved = plan;
    moved.source = "/elsewhere/ckpt";
    EXPECT_EQ(pipeline::plan_fingerprint(moved, recipe), base);
  }

  using Mutation = std::function<void(pipeline::Plan&)>;
  const std::vector<std::pair<const char*, Mutation>> mutations = {
      {"tensor name", [&](auto& p) { p.tensors[q].source += "x"; }},
      {"source shard", [&](auto& p) { p.tensors[q].source_shard += "x"; }},
      {"source dtype", [&](auto& p) { p.tensors[q].source_info.dtype = DType::F16; }},
      {"source shape", [&](auto& p) { p.tensors[q].source_info.shape[0] += 1; }},
      {"action", [&](auto& p) { p.tensors[q].action = recipe::Action::Keep; }},
      {"scheme", [&](auto& p) { p.tensors[q].scheme.reset(); }},
      {"module", [&](auto& p) { p.tensors[q].module += "x"; }},
      {"fused group", [&](auto& p) { p.tensors[q].fused_group.clear(); }},
      {"input amax", [&](auto& p) { p.tensors[q].input_amax = 2.5f; }},
      {"stored weight", [&](auto& p) {
         p.tensors[q].stored = pipeline::StoredWeight{*p.tensors[q].scheme, {32, 64}, {"a", "b"}, 100};
       }},
      {"output name", [&](auto& p) { p.tensors[q].outputs[1].info.name += "x"; }},
      {"output dtype", [&](auto& p) { p.tensors[q].outputs[1].info.dtype = DType::F32; }},
      {"output shape", [&](auto& p) { p.tensors[q].outputs[1].info.shape.push_back(1); }},
      {"output role", [&](auto& p) { p.tensors[q].outputs[1].role.reset(); }},
      {"output count", [&](auto& p) { p.tensors[q].outputs.pop_back(); }},
      {"shard name", [&](auto& p) { p.shards[0].name += "x"; }},
      {"shard order", [&](auto& p) { std::swap(p.shards[0].tensors[0], p.shards[0].tensors[1]); }},
      {"dialect", [&](auto& p) { p.dialect = exporter::Dialect::Quark; }},
      {"linear module", [&](auto& p) { p.linear_modules[0].module += "x"; }},
      {"linear module scheme", [&](auto& p) { p.linear_modules[0].scheme.reset(); }},
      {"linear module preexisting", [&](auto& p) { p.linear_modules[0].preexisting = !p.linear_modules[0].preexisting; }},
      {"warning", [&](auto& p) { p.warnings.push_back("w"); }},
      {"recipe path", [&](auto& p) { p.recipe_path += "x"; }},
      // A character moved across a field boundary is a different plan.
      {"field boundary", [&](auto& p) {
         p.tensors[q].module = p.tensors[q].source.back() + p.tensors[q].module;
         p.tensors[q].source.pop_back();
       }},
  };
  for (const auto& [what, mutate] : mutations) {
    pipeline::Plan changed = plan;
    mutate(changed);
    EXPECT_NE(pipeline::plan_fingerprint(changed, recipe), base) << what;
  }
  recipe::Recipe edited = recipe;
  edited.text += "# an option's default spelled out\n";
  EXPECT_NE(pipeline::plan_fingerprint(plan, edited), base) << "recipe text";
}

}  // namespace

namespace {

// The manifest is written as text (not a printed JSON tree): it must parse,
// escape what needs escaping, and turn non-finite metrics into null.
TEST(Manifest, TextParsesWithEveryTensorHashAndMetric) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-manifest-{}", ::getpid());
  fs::remove_all(dir);
  auto ck = io::Checkpoint::open(write_checkpoint(dir / "ckpt"));
  auto recipe = recipe::parse_recipe(
      "name: t\narch: llama\ndialect: compressed-tensors\ndefault:\n  scheme: nvfp4\n"
      "  options: {activations: none}\n# a \"quoted\" comment \\ with a backslash\n",
      "dir with \"quotes\"/test.yaml");
  const pipeline::Plan plan = pipeline::make_plan(*ck, recipe);
  fs::remove_all(dir);
  std::vector<pipeline::TensorRecord> records(plan.tensors.size());
  for (std::size_t i = 0; i < records.size(); ++i) {
    records[i].source = plan.tensors[i].source;
    records[i].source_hash = 0x0123456789abcdefULL + i;
    records[i].output_hashes.assign(plan.tensors[i].outputs.size(), 0xfedcba9876543210ULL - i);
    if (plan.tensors[i].scheme) {
      quant::ErrorMetrics m;  // a perfect quantization: SNR is +Inf
      m.sum_sq_ref = m.sum_dot = m.sum_sq_dq = 4.0;
      m.elements = 2048;
      m.blocks = 128;
      records[i].metrics = m;
    }
  }
  const auto m = nlohmann::json::parse(pipeline::manifest_json(plan, recipe, records, pipeline::RunMode::FileToFile));
  EXPECT_EQ(m["recipe"]["text"], recipe.text);
  EXPECT_EQ(m["recipe"]["path"], recipe.path);
  EXPECT_EQ(m["selq_version"], SELQ_VERSION);
  EXPECT_FALSE(m["in_place"].get<bool>());
  ASSERT_EQ(m["tensors"].size(), plan.tensors.size());
  std::size_t quantized = 0;
  for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
    const auto& t = plan.tensors[i];
    const auto& e = m["tensors"][i];
    EXPECT_EQ(e["source"], t.source);
    EXPECT_EQ(e["source_shape"].get<Shape>(), t.source_info.shape);
    EXPECT_EQ(e["source_xxh3"], pipeline::hash_hex(records[i].source_hash));
    ASSERT_EQ(e["outputs"].size(), t.outputs.size());
    for (std::size_t k = 0; k < t.outputs.size(); ++k) {
      EXPECT_EQ(e["outputs"][k]["name"], t.outputs[k].info.name);
      EXPECT_EQ(e["outputs"][k]["shape"].get<Shape>(), t.outputs[k].info.shape);
      EXPECT_EQ(e["outputs"][k]["xxh3"], pipeline::hash_hex(records[i].output_hashes[k]));
      EXPECT_EQ(e["outputs"][k]["shard"], plan.shards[0].name);
    }
    if (t.scheme) {
      ++quantized;
      EXPECT_EQ(e["format"], "nvfp4");
      EXPECT_EQ(e["module"], t.module);
      EXPECT_TRUE(e["metrics"]["snr_db"].is_null());
      EXPECT_EQ(e["metrics"]["cosine"], 1.0);
      EXPECT_EQ(e["metrics"]["elements"], 2048);
    } else {
      EXPECT_FALSE(e.contains("metrics"));
      EXPECT_EQ(e["format"], "unquantized");
    }
  }
  EXPECT_EQ(m["formats"]["nvfp4"].size(), quantized);
  EXPECT_EQ(m["formats"]["unquantized"].size(), plan.tensors.size() - quantized);
}

}  // namespace
