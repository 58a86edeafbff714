// import-gguf's architecture handling on tiny GGUF files: the config.json of
// a Qwen2 file, and the one-line errors for tensors a Qwen2 file must or must
// not have.
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"
#include "gguf_test_writer.h"
#include "runtime/gguf/gguf.h"
#include "runtime/gguf/import_gguf.h"

namespace selq::runtime {
namespace {

using testutil::Gguf;
using testutil::write_tmp;

// Qwen2 metadata for one block (hidden 8, 2 heads, 1 KV head) and F32
// tensors of 4 elements named `tensors` (shapes do not matter before the
// checks under test).
std::string qwen2_file(const std::vector<std::string>& tensors, const std::string& name) {
  Gguf g;
  g.header(tensors.size(), 10).kv_str("general.architecture", "qwen2");
  g.kv_u32("qwen2.block_count", 1).kv_u32("qwen2.context_length", 64).kv_u32("qwen2.embedding_length", 8);
  g.kv_u32("qwen2.feed_forward_length", 16).kv_u32("qwen2.attention.head_count", 2);
  g.kv_u32("qwen2.attention.head_count_kv", 1).kv_u32("qwen2.vocab_size", 2);
  g.kv_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6f).kv_f32("qwen2.rope.freq_base", 1e6f);
  std::uint64_t off = 0;
  for (const auto& t : tensors) {
    g.tensor(t, {4}, 0, off);
    off += 32;  // 16 bytes of data, padded to the default alignment
  }
  g.pad().bytes(std::vector<std::uint8_t>(off, 0));
  return write_tmp(g.b, name);
}

TEST(ImportGguf, Qwen2Config) {
  auto f = GgufFile::open(qwen2_file({"token_embd.weight", "output.weight"}, "qwen2cfg"));
  const auto c = llama_config_from_gguf(*f);
  EXPECT_EQ(c["architectures"][0], "Qwen2ForCausalLM");
  EXPECT_EQ(c["model_type"], "qwen2");
  EXPECT_EQ(c["num_key_value_heads"], 1);
  EXPECT_EQ(c["head_dim"], 4);
  EXPECT_EQ(c["rope_theta"], 1e6);
  EXPECT_EQ(c["rms_norm_eps"], 1e-6);
  EXPECT_EQ(c["tie_word_embeddings"], false);  // the file has output.weight
  EXPECT_EQ(c["use_sliding_window"], false);
  EXPECT_FALSE(c.contains("attention_bias"));  // not a Qwen2Config field: the biases always exist
}

void expect_import_error(const std::string& path, const std::string& tensor, ErrorKind kind) {
  try {
    import_gguf(path, path + ".out");
    FAIL() << "accepted; expected an error naming " << tensor;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_EQ(e.where().tensor, tensor) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(ImportGguf, Qwen2BiasesChecked) {
  expect_import_error(qwen2_file({"token_embd.weight", "blk.0.attn_q.weight"}, "qwen2nobias"),
                      "blk.0.attn_q.bias", ErrorKind::BadInput);
  expect_import_error(qwen2_file({"token_embd.weight", "blk.0.attn_q.bias", "blk.0.attn_k.bias",
                                  "blk.0.attn_v.bias", "blk.0.attn_output.bias"},
                                 "qwen2obias"),
                      "blk.0.attn_output.bias", ErrorKind::Unsupported);
}

TEST(ImportGguf, OtherArchitecturesRefused) {
  Gguf g;
  g.header(0, 1).kv_str("general.architecture", "gemma");
  try {
    llama_config_from_gguf(*GgufFile::open(write_tmp(g.b, "gemma")));
    FAIL() << "accepted gemma";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("'gemma'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace selq::runtime
