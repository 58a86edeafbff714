// A rotation folded into the weights leaves the model's function unchanged:
// selq's runtime gives the original's logits from the rotated checkpoint
// (Llama with GQA, tied and untied heads, Qwen2's biases; DeepSeek-V3's MLA
// and experts), and what cannot be rotated is refused before anything is written.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <unistd.h>

#include "../small_synth.h"
#include "core/codecs.h"
#include "core/error.h"
#include "io/checkpoint.h"
#include "pipeline/synth.h"
#include "rotation/rotate_checkpoint.h"
#include "runtime/model/causal_lm.h"
#include "runtime/text/tokenizer.h"
#include "../runtime/test_model_util.h"

namespace fs = std::filesystem;

namespace selq::rotation {
namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("selq-rotate-{}-{}", name, ::getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// max |a - b| / max |a| over the logits of the same tokens.
double logit_gap(const std::string& a_dir, const std::string& b_dir, const std::vector<std::int32_t>& toks) {
  const auto a = runtime::load_model(a_dir)->forward(toks);
  const auto b = runtime::load_model(b_dir)->forward(toks);
  EXPECT_EQ(a.size(), b.size());
  double scale = 0, gap = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    scale = std::max(scale, double(std::abs(a[i])));
    gap = std::max(gap, double(std::abs(a[i] - b[i])));
  }
  return gap / scale;
}

std::vector<float> floats_of(const io::Checkpoint& ck, const std::string& name) {
  const auto* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  std::vector<float> v(shape_numel(t->info.shape));
  load_floats(t->info.dtype, ck.view(name).bytes.data(), 0, v.size(), v.data());
  return v;
}

const std::vector<std::int32_t> kTokens{1, 5, 9, 33, 2, 17, 60, 3, 8, 41, 12, 7};

struct LlamaCase {
  bool tied, bias;
  RotationKind kind;
};

class RotateLlama : public ::testing::TestWithParam<LlamaCase> {};

TEST_P(RotateLlama, SameLogitsInTheRuntime) {
  const auto c = GetParam();
  const fs::path d = fresh_dir(fmt::format("llama-{}{}{}", c.tied, c.bias, int(c.kind)));
  runtime::testing::TinyLlama tl;
  tl.tied = c.tied;
  tl.qkv_bias = c.bias;
  runtime::testing::write_tiny_llama((d / "src").string(), tl, false);
  RotateOptions o;
  o.kind = c.kind;
  o.seed = 3;
  const auto r = rotate_checkpoint((d / "src").string(), (d / "rot").string(), o);
  EXPECT_EQ(r.record["rotation"], rotation_kind_name(c.kind));
  EXPECT_EQ(r.record["head_written"], c.tied);
  EXPECT_LT(logit_gap((d / "src").string(), (d / "rot").string(), kTokens), 2e-5);

  const auto ck = io::Checkpoint::open((d / "rot").string());
  EXPECT_FALSE(ck->config()["tie_word_embeddings"].get<bool>());
  for (float g : floats_of(*ck, "model.layers.1.input_layernorm.weight")) ASSERT_EQ(g, 1.f);
  for (float g : floats_of(*ck, "model.norm.weight")) ASSERT_EQ(g, 1.f);
  // The weights did change: an unrotated copy would pass the logits check too.
  const auto src = io::Checkpoint::open((d / "src").string());
  EXPECT_NE(floats_of(*ck, "model.layers.0.mlp.down_proj.weight"), floats_of(*src, "model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(io::read_rotation_record((d / "rot").string())["seed"], 3);
  fs::remove_all(d);
}

INSTANTIATE_TEST_SUITE_P(Cases, RotateLlama,
                         ::testing::Values(LlamaCase{true, false, RotationKind::R1},
                                           LlamaCase{false, true, RotationKind::R1},
                                           LlamaCase{true, true, RotationKind::R1R2},
                                           LlamaCase{false, false, RotationKind::R1R2}));

TEST(Rotate, R2ChangesValueHeadsAndKeepsQueriesAndKeys) {
  const fs::path d = fresh_dir("r2");
  runtime::testing::write_tiny_llama((d / "src").string(), {}, false);
  RotateOptions o;
  o.kind = RotationKind::R1;
  rotate_checkpoint((d / "src").string(), (d / "r1").string(), o);
  o.kind = RotationKind::R1R2;
  rotate_checkpoint((d / "src").string(), (d / "r1r2").string(), o);
  const auto a = io::Checkpoint::open((d / "r1").string()), b = io::Checkpoint::open((d / "r1r2").string());
  EXPECT_EQ(floats_of(*a, "model.layers.0.self_attn.q_proj.weight"), floats_of(*b, "model.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(floats_of(*a, "model.layers.0.self_attn.k_proj.weight"), floats_of(*b, "model.layers.0.self_attn.k_proj.weight"));
  EXPECT_NE(floats_of(*a, "model.layers.0.self_attn.v_proj.weight"), floats_of(*b, "model.layers.0.self_attn.v_proj.weight"));
  EXPECT_NE(floats_of(*a, "model.layers.0.self_attn.o_proj.weight"), floats_of(*b, "model.layers.0.self_attn.o_proj.weight"));
  fs::remove_all(d);
}

TEST(Rotate, DeepseekV3MlaAndExpertsKeepTheirLogits) {
  const fs::path d = fresh_dir("deepseek");
  pipeline::SynthOptions so = test::small_moe_synth();
  so.dtype = DType::F32;
  pipeline::write_synth_checkpoint(so, (d / "src").string());
  for (RotationKind k : {RotationKind::R1, RotationKind::R1R2}) {
    RotateOptions o;
    o.kind = k;
    const std::string dst = (d / rotation_kind_name(k)).string();
    const auto r = rotate_checkpoint((d / "src").string(), dst, o);
    EXPECT_LT(logit_gap((d / "src").string(), dst, kTokens), 2e-5) << rotation_kind_name(k);
    EXPECT_EQ(r.record["family"], "deepseek-v3");
    EXPECT_TRUE(fs::exists(fs::path(dst) / "tokenizer.json"));
    EXPECT_TRUE(fs::exists(fs::path(dst) / io::kIndexName));
  }
  fs::remove_all(d);
}

TEST(Rotate, BF16SourceStaysBF16AndClose) {
  const fs::path d = fresh_dir("bf16");
  runtime::testing::write_tiny_llama((d / "src").string(), {}, true);
  rotate_checkpoint((d / "src").string(), (d / "rot").string(), {});
  const auto ck = io::Checkpoint::open((d / "rot").string());
  EXPECT_EQ(ck->find("model.layers.0.mlp.up_proj.weight")->info.dtype, DType::BF16);
  // BF16 rounding of every rotated weight (2^-9 relative) is all that differs.
  EXPECT_LT(logit_gap((d / "src").string(), (d / "rot").string(), kTokens), 2e-2);
  fs::remove_all(d);
}

TEST(Rotate, RefusesWhatItCannotRotateBeforeWriting) {
  const fs::path d = fresh_dir("refuse");
  runtime::testing::write_tiny_llama((d / "src").string(), {}, false);
  rotate_checkpoint((d / "src").string(), (d / "rot").string(), {});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  // Twice.
  EXPECT_NE(message([&] { rotate_checkpoint((d / "rot").string(), (d / "rot2").string(), {}); }).find("already rotated"),
            std::string::npos);
  EXPECT_NE(message([&] { rotate_checkpoint((d / "src").string(), (d / "rot").string(), {}); }).find("destination exists"),
            std::string::npos);
  // An architecture the runtime does not run.
  {
    auto cfg = nlohmann::json::parse(std::ifstream(d / "src" / "config.json"));
    cfg["model_type"] = "gpt_neox";
    std::ofstream(d / "src" / "config.json") << cfg.dump();
    EXPECT_NE(message([&] { rotate_checkpoint((d / "src").string(), (d / "x").string(), {}); }).find("gpt_neox"),
              std::string::npos);
    cfg["model_type"] = "llama";
    cfg["quantization_config"] = {{"quant_method", "fp8"}};
    std::ofstream(d / "src" / "config.json") << cfg.dump();
    EXPECT_NE(message([&] { rotate_checkpoint((d / "src").string(), (d / "x").string(), {}); }).find("already quantized"),
              std::string::npos);
  }
  EXPECT_FALSE(fs::exists(d / "x"));
  EXPECT_FALSE(fs::exists(d / "rot2"));
  // A tensor with no rule (an MTP layer's, say) is named.
  {
    const fs::path s2 = d / "extra";
    runtime::testing::write_tiny_llama(s2.string(), {}, false);
    std::vector<io::TensorBytes> t(1);
    t[0].info = {"model.layers.0.mlp.experts_bias", DType::F32, {4}};
    t[0].bytes.resize(16);
    io::save_safetensors((s2 / "extra.safetensors").string(), t);
    const std::string m = message([&] { rotate_checkpoint(s2.string(), (d / "y").string(), {}); });
    EXPECT_NE(m.find("model.layers.0.mlp.experts_bias"), std::string::npos) << m;
  }
  fs::remove_all(d);
}

}  // namespace
}  // namespace selq::rotation
