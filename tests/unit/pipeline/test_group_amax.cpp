// NVFP4 fused groups (q/k/v, gate/up) share one global scale, from the max
// amax of their members: computed on demand (file to file), over a subset of
// members (one rank's, reduced by max), journaled once (in place), and the
// same in the written checkpoint.
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "core/codecs.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "pipeline/journal.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "pipeline/shard_writer.h"
#include "recipe/recipe.h"

namespace fs = std::filesystem;
using namespace selq;
using pipeline::detail::GroupAmax;
using pipeline::detail::TensorSource;

namespace {

// One llama layer whose projections have known amaxes: each weight is 0.01
// everywhere but one element, which is the amax.
const std::map<std::string, float> kAmax = {
    {"model.layers.0.self_attn.q_proj", 1.0f}, {"model.layers.0.self_attn.k_proj", 3.0f},
    {"model.layers.0.self_attn.v_proj", 2.0f}, {"model.layers.0.self_attn.o_proj", 5.0f},
    {"model.layers.0.mlp.gate_proj", 0.5f},    {"model.layers.0.mlp.up_proj", 4.0f},
    {"model.layers.0.mlp.down_proj", 6.0f}};

struct Fixture {
  fs::path dir = fs::temp_directory_path() / fmt::format("selq-group-amax-{}", ::getpid());
  std::unique_ptr<io::Checkpoint> ckpt;
  recipe::Recipe recipe = recipe::parse_recipe(
      "name: nv\narch: llama\ndialect: compressed-tensors\ndefault: {scheme: nvfp4, options: {activations: none}}\n",
      "nv.yaml");
  pipeline::Plan plan;
  Fixture() {
    fs::remove_all(dir);
    fs::create_directories(dir / "src");
    std::vector<TensorInfo> infos;
    for (const auto& [m, a] : kAmax) infos.push_back({m + ".weight", DType::BF16, {32, 64}});
    io::SafetensorsWriter w((dir / "src" / "model.safetensors").string(), infos);
    for (const auto& [m, a] : kAmax) {
      std::vector<std::uint16_t> v(32 * 64, f32_to_bf16_ref(0.01f));
      v[7 * 64 + 5] = f32_to_bf16_ref(-a);  // |min| is the amax
      w.write(m + ".weight", {reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * 2});
    }
    w.commit();
    std::ofstream(dir / "src" / "config.json") << R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama"})";
    ckpt = io::Checkpoint::open((dir / "src").string());
    plan = pipeline::make_plan(*ckpt, recipe);
  }
  ~Fixture() { fs::remove_all(dir); }
  TensorSource source() const {
    return {[this](const std::string&, const std::string& t) { return ckpt->fetch(t); }, true, {}};
  }
  const pipeline::PlannedTensor& tensor(const std::string& module) const {
    for (const auto& t : plan.tensors)
      if (t.module == module) return t;
    throw std::runtime_error("no tensor " + module);
  }
  std::size_t index(const std::string& module) const { return static_cast<std::size_t>(&tensor(module) - plan.tensors.data()); }
};

const std::string kQkv = "model.layers.0.self_attn.qkv_proj";
const std::string kGateUp = "model.layers.0.mlp.gate_up_proj";

}  // namespace

TEST(GroupAmax, MembersShareTheirGroupsMaxAndOthersKeepTheirOwn) {
  Fixture f;
  EXPECT_EQ(f.tensor("model.layers.0.self_attn.k_proj").fused_group, kQkv);
  EXPECT_EQ(f.tensor("model.layers.0.mlp.up_proj").fused_group, kGateUp);
  EXPECT_TRUE(f.tensor("model.layers.0.self_attn.o_proj").fused_group.empty());
  const TensorSource src = f.source();
  GroupAmax on_demand(src, f.plan);
  for (const char* m : {"q_proj", "k_proj", "v_proj"})
    EXPECT_EQ(on_demand.of(f.tensor(std::string("model.layers.0.self_attn.") + m)), 3.0f) << m;
  for (const char* m : {"gate_proj", "up_proj"})
    EXPECT_EQ(on_demand.of(f.tensor(std::string("model.layers.0.mlp.") + m)), 4.0f) << m;
  // Known values (exchanged or journaled) are taken as they are, without reading.
  GroupAmax known({{kQkv, 7.0f}, {kGateUp, 8.0f}});
  EXPECT_EQ(known.of(f.tensor("model.layers.0.self_attn.q_proj")), 7.0f);
  EXPECT_EQ(known.of(f.tensor("model.layers.0.mlp.gate_proj")), 8.0f);
}

TEST(GroupAmax, PartsOverSubsetsReduceToTheWholeGroupsMax) {
  Fixture f;
  const TensorSource src = f.source();
  // Two "ranks": q and gate on one, k, v and up on the other.
  auto a = pipeline::detail::group_amax_of(src, f.plan, {f.index("model.layers.0.self_attn.q_proj"),
                                                         f.index("model.layers.0.mlp.gate_proj")});
  auto b = pipeline::detail::group_amax_of(src, f.plan, {f.index("model.layers.0.self_attn.k_proj"),
                                                         f.index("model.layers.0.self_attn.v_proj"),
                                                         f.index("model.layers.0.mlp.up_proj")});
  EXPECT_EQ(a.at(kQkv), 1.0f);
  EXPECT_EQ(a.at(kGateUp), 0.5f);
  EXPECT_EQ(std::max(a.at(kQkv), b.at(kQkv)), 3.0f);
  EXPECT_EQ(std::max(a.at(kGateUp), b.at(kGateUp)), 4.0f);
}

TEST(GroupAmax, JournaledOnceThenReadBackWithoutTheSource) {
  Fixture f;
  const std::string path = (f.dir / "journal.json").string();
  const std::string fp = pipeline::plan_fingerprint(f.plan, f.recipe);
  {
    pipeline::Journal j(path, fp);
    auto amax = pipeline::detail::journaled_group_amax(j, f.source(), f.plan);
    EXPECT_EQ(amax.at(kQkv), 3.0f);
    EXPECT_EQ(amax.at(kGateUp), 4.0f);
  }
  // A resumed run: the shards may already be rewritten, so the source must not be read.
  pipeline::Journal j(path, fp);
  ASSERT_TRUE(j.has_group_amax());
  const TensorSource unreadable{[](const std::string&, const std::string& t) -> io::FetchedTensor {
                                  throw std::runtime_error("read " + t);
                                },
                                true, {}};
  auto amax = pipeline::detail::journaled_group_amax(j, unreadable, f.plan);
  EXPECT_EQ(amax.at(kQkv), 3.0f);
  EXPECT_EQ(amax.at(kGateUp), 4.0f);
}

TEST(GroupAmax, WrittenMembersCarryOneGlobalScale) {
  Fixture f;
  const std::string dst = (f.dir / "dst").string();
  pipeline::run_quantize(*f.ckpt, f.plan, f.recipe, dst);
  auto out = io::Checkpoint::open(dst);
  auto global = [&](const std::string& m) {
    float g = 0;
    std::memcpy(&g, out->view(m + ".weight_global_scale").bytes.data(), 4);
    return g;
  };
  // compressed-tensors convention, torch in the weight dtype: bf16(bf16(1 / amax) * 448 * 6) (quant/nvfp4.cpp).
  auto ct_global = [](float amax) {
    return bf16_to_f32(f32_to_bf16_ref(bf16_to_f32(f32_to_bf16_ref(1.0f / amax)) * 2688.0f));
  };
  for (const char* m : {"q_proj", "k_proj", "v_proj"})
    EXPECT_EQ(global(std::string("model.layers.0.self_attn.") + m), ct_global(3.0f)) << m;
  for (const char* m : {"gate_proj", "up_proj"})
    EXPECT_EQ(global(std::string("model.layers.0.mlp.") + m), ct_global(4.0f)) << m;
  EXPECT_EQ(global("model.layers.0.self_attn.o_proj"), ct_global(5.0f));
  EXPECT_NE(ct_global(3.0f), ct_global(1.0f));  // q's own amax would give another scale
}
