// make_plan's layout: which output shard each tensor lands in (the source's
// layout, or shards capped in size), the NVFP4 fused groups, and the sizes the
// plan reports. Checked against a synthetic llama written in the test.
#include <filesystem>
#include <map>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/error.h"
#include "export/dialect.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/synth.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;
using namespace selq;

namespace {

// A two-layer llama (hidden 576, vocab 1024) in source shards of at most 2 MB.
class PlanLayout : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / fmt::format("selq-plan-layout-{}", ::getpid()));
    fs::remove_all(*dir_);
    pipeline::SynthOptions o;
    o.arch = "llama";
    o.layers = 2;
    o.vocab = 1024;
    o.max_shard_bytes = 2u << 20;
    pipeline::write_synth_checkpoint(o, dir_->string());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static pipeline::Plan plan(const std::string& scheme, std::uint64_t max_shard_bytes = 0) {
    const auto ckpt = io::Checkpoint::open(dir_->string());
    // "keep": no default scheme, every tensor is kept.
    const std::string yaml = "name: t\narch: llama\ndialect: compressed-tensors\n" +
                             (scheme == "keep" ? std::string() : fmt::format("default:\n  scheme: {}\n", scheme));
    const auto r = recipe::parse_recipe(yaml, "t.yaml");
    pipeline::PlanOptions po;
    po.max_shard_bytes = max_shard_bytes;
    return pipeline::make_plan(*ckpt, r, po);
  }
  static fs::path* dir_;
};
fs::path* PlanLayout::dir_ = nullptr;

// A recipe's dialect is one of export's names; another is refused at its place.
TEST_F(PlanLayout, UnknownDialectIsRefusedAtItsLine) {
  const auto ckpt = io::Checkpoint::open(dir_->string());
  const auto r = recipe::parse_recipe("name: t\narch: llama\ndialect: gguf\ndefault: {scheme: nvfp4}\n", "t.yaml");
  pipeline::PlanOptions overridden;  // --dialect does not hide the recipe's typo
  overridden.dialect = exporter::Dialect::Quark;
  for (const pipeline::PlanOptions& po : {pipeline::PlanOptions{}, overridden}) {
    try {
      pipeline::make_plan(*ckpt, r, po);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::BadInput);
      EXPECT_NE(std::string(e.what()).find("t.yaml:3:10"), std::string::npos) << e.what();
      EXPECT_NE(
          std::string(e.what()).find("unknown dialect 'gguf' (expected one of: compressed-tensors, quark, modelopt)"),
          std::string::npos)
          << e.what();
    }
  }
}

// Every planned tensor appears in exactly one shard.
void expect_each_tensor_once(const pipeline::Plan& p) {
  std::vector<int> seen(p.tensors.size(), 0);
  for (const auto& s : p.shards)
    for (auto i : s.tensors) ++seen.at(i);
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], 1) << p.tensors[i].source;
}

std::uint64_t shard_bytes(const pipeline::Plan& p, const pipeline::PlannedShard& s) {
  std::uint64_t b = 0;
  for (auto i : s.tensors) b += p.tensors[i].out_bytes();
  return b;
}

}  // namespace

TEST_F(PlanLayout, KeepsTheSourceShardsTheirNamesAndOrder) {
  const auto ckpt = io::Checkpoint::open(dir_->string());
  ASSERT_GT(ckpt->shards().size(), 3u);  // the test needs several source shards
  const auto p = plan("fp8-channel");
  ASSERT_EQ(p.shards.size(), ckpt->shards().size());
  expect_each_tensor_once(p);
  for (std::size_t k = 0; k < p.shards.size(); ++k) {
    EXPECT_EQ(p.shards[k].name, ckpt->shards()[k]);
    std::size_t prev = 0;
    for (std::size_t j = 0; j < p.shards[k].tensors.size(); ++j) {
      const auto i = p.shards[k].tensors[j];
      EXPECT_EQ(p.tensors[i].source_shard, p.shards[k].name) << p.tensors[i].source;
      if (j > 0) {
        EXPECT_GT(i, prev) << "source order";
      }
      prev = i;
    }
  }
}

TEST_F(PlanLayout, CappedShardsHoldAtMostTheCapUnlessOneTensorIsLarger) {
  const std::uint64_t cap = 1u << 20;
  const auto p = plan("fp8-channel", cap);
  expect_each_tensor_once(p);
  ASSERT_GT(p.shards.size(), 2u);
  std::size_t next = 0;  // shards take consecutive runs of the plan's tensors
  for (std::size_t k = 0; k < p.shards.size(); ++k) {
    const auto& s = p.shards[k];
    EXPECT_EQ(s.name, fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, p.shards.size()));
    ASSERT_FALSE(s.tensors.empty());
    for (auto i : s.tensors) EXPECT_EQ(i, next++);
    const auto b = shard_bytes(p, s);
    if (s.tensors.size() > 1) {
      EXPECT_LE(b, cap) << s.name;
    }
    // Greedy: the next shard's first tensor would not have fitted here.
    if (k + 1 < p.shards.size()) {
      EXPECT_GT(b + p.tensors[p.shards[k + 1].tensors.front()].out_bytes(), cap) << s.name;
    }
  }
  EXPECT_EQ(next, p.tensors.size());
  // The embedding (1024 x 576 BF16, kept) is larger than the cap: a shard of its own.
  bool embed_alone = false;
  for (const auto& s : p.shards)
    for (auto i : s.tensors)
      if (p.tensors[i].source == "model.embed_tokens.weight") embed_alone = s.tensors.size() == 1;
  EXPECT_TRUE(embed_alone);
  std::uint64_t largest = 0;
  for (const auto& s : p.shards) largest = std::max(largest, shard_bytes(p, s));
  EXPECT_EQ(p.largest_output_shard_bytes(), largest);
}

TEST_F(PlanLayout, Nvfp4FusedModulesShareOneGroupKey) {
  const auto p = plan("nvfp4");
  std::map<std::string, std::set<std::string>> groups;  // key -> modules
  for (const auto& t : p.tensors)
    if (t.scheme && t.source.ends_with(".weight")) groups[t.fused_group].insert(t.module);
  const std::string l0 = "model.layers.0.";
  EXPECT_EQ(groups[l0 + "self_attn.qkv_proj"],
            (std::set<std::string>{l0 + "self_attn.q_proj", l0 + "self_attn.k_proj", l0 + "self_attn.v_proj"}));
  EXPECT_EQ(groups[l0 + "mlp.gate_up_proj"], (std::set<std::string>{l0 + "mlp.gate_proj", l0 + "mlp.up_proj"}));
  // Unfused modules (o_proj, down_proj) have no group: their global scale is their own.
  EXPECT_TRUE(groups[""].count(l0 + "self_attn.o_proj"));
  EXPECT_TRUE(groups[""].count(l0 + "mlp.down_proj"));
  // FP8 per channel has no global scale: no groups at all.
  for (const auto& t : plan("fp8-channel").tensors) EXPECT_TRUE(t.fused_group.empty()) << t.source;
}

TEST_F(PlanLayout, SizesAddUpAndBitsPerWeightFollowTheScheme) {
  const auto keep = plan("keep");
  EXPECT_EQ(keep.output_bytes(), keep.source_bytes());
  EXPECT_DOUBLE_EQ(keep.bits_per_weight(), 16.0);

  // FP8 per channel: one byte per element plus one BF16 scale per output row.
  const auto fp8 = plan("fp8-channel");
  EXPECT_EQ(fp8.source_bytes(), keep.source_bytes());
  std::uint64_t elements = 0, rows = 0;
  for (const auto& t : fp8.tensors)
    if (t.scheme) {
      elements += shape_numel(t.source_info.shape);
      rows += static_cast<std::uint64_t>(t.source_info.shape.at(0));
    }
  ASSERT_GT(elements, 0u);
  EXPECT_DOUBLE_EQ(fp8.bits_per_weight(), 8.0 * static_cast<double>(elements + 2 * rows) / static_cast<double>(elements));
  std::uint64_t total = 0;
  for (const auto& t : fp8.tensors) total += t.out_bytes();
  EXPECT_EQ(fp8.output_bytes(), total);
  EXPECT_LT(fp8.output_bytes(), keep.output_bytes());
}

TEST_F(PlanLayout, OutputsNameTheDialectsTensors) {
  const auto p = plan("nvfp4");
  for (const auto& t : p.tensors) {
    if (t.source != "model.layers.1.mlp.down_proj.weight") continue;
    std::set<std::string> names;
    for (const auto& o : t.outputs) names.insert(o.info.name);
    const std::string m = "model.layers.1.mlp.down_proj.";
    EXPECT_EQ(names, (std::set<std::string>{m + "weight_packed", m + "weight_scale", m + "weight_global_scale"}));
    for (const auto& o : t.outputs)
      if (o.info.name == m + "weight_packed") {
        EXPECT_EQ(o.info.shape, (Shape{576, 1536 / 2}));
      }
    return;
  }
  FAIL() << "down_proj of layer 1 not planned";
}
