// Byte-level BPE pieces: the split pattern, byte map, merge order, added
// tokens, tokenizer.json round trip, and the import helpers' row shuffle.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"
#include "runtime/gguf/import_gguf.h"
#include "runtime/text/tokenizer.h"
#include "runtime/text/tokenizer_unicode.h"

namespace selq::runtime {
namespace {

std::vector<std::string> split(std::string_view s, PreTokenizer kind = PreTokenizer::Smollm) {
  std::vector<std::string> out;
  for (auto p : pretokenize(s, kind)) out.emplace_back(p);
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenize, Gpt2PatternWithDigitIsolation) {
  EXPECT_EQ(split("Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("hello   world  "), (V{"hello", "  ", " world", "  "}));
  EXPECT_EQ(split("don't we'll 'S"), (V{"don", "'t", " we", "'ll", " '", "S"}));
  EXPECT_EQ(split("a 12 b"), (V{"a", " ", "1", "2", " b"}));
  EXPECT_EQ(split("a 12 b", PreTokenizer::Gpt2), (V{"a", " 12", " b"}));
  EXPECT_EQ(split("x?!' y\n\nz"), (V{"x", "?!'", " y", "\n", "\n", "z"}));
  EXPECT_EQ(split("naïve 日本"), (V{"naïve", " 日本"}));
  EXPECT_EQ(split("½x"), (V{"½", "x"}));  // No is a number, isolated by Digits
  EXPECT_EQ(split(""), V{});
}

// Expected pieces are what `tokenizers` 0.23.3's Split(Regex(kQwen2Pattern),
// Isolated) returns for the same strings.
TEST(Pretokenize, Qwen2Pattern) {
  const auto q = PreTokenizer::Qwen2;
  EXPECT_EQ(split("hello   world  ", q), (V{"hello", "  ", " world", "  "}));
  EXPECT_EQ(split("DON'T we'LL 'S", q), (V{"DON", "'T", " we", "'LL", " '", "S"}));  // (?i:...)
  EXPECT_EQ(split("a 12 b", q), (V{"a", " ", "1", "2", " b"}));
  EXPECT_EQ(split("x?!' y\n\nz", q), (V{"x", "?!'", " y", "\n\n", "z"}));
  EXPECT_EQ(split("a  \n\n  b", q), (V{"a", "  \n\n", " ", " b"}));  // \s*[\r\n]+ ends at the last newline
  EXPECT_EQ(split("x\t\ty", q), (V{"x", "\t", "\ty"}));
  EXPECT_EQ(split("  \r\n\t z", q), (V{"  \r\n", "\t", " z"}));
  EXPECT_EQ(split("def f(x):\n    return x\n", q), (V{"def", " f", "(x", "):\n", "   ", " return", " x", "\n"}));
  EXPECT_EQ(split("\tfoo.bar", q), (V{"\tfoo", ".bar"}));
  EXPECT_EQ(split("'\u017F", q), (V{"'\u017F"}));  // long s does not fold to 's
  EXPECT_EQ(split("½x", q), (V{"½", "x"}));
}

TEST(Unicode, Classes) {
  EXPECT_TRUE(unicode::is_letter(U'é'));
  EXPECT_TRUE(unicode::is_letter(U'日'));
  EXPECT_FALSE(unicode::is_letter(U'1'));
  EXPECT_TRUE(unicode::is_number(U'٣'));
  EXPECT_TRUE(unicode::is_whitespace(0x3000));
  EXPECT_FALSE(unicode::is_whitespace(0x200B));  // zero-width space is not White_Space
}

TEST(ByteMap, Gpt2Mapping) {
  EXPECT_EQ(byte_to_unicode(' '), U'Ġ');
  EXPECT_EQ(byte_to_unicode('\n'), U'Ċ');
  EXPECT_EQ(byte_to_unicode('a'), U'a');
  EXPECT_EQ(byte_to_unicode(0xAD), char32_t{0x143});
  for (int b = 0; b < 256; ++b) EXPECT_EQ(unicode_to_byte(byte_to_unicode(static_cast<std::uint8_t>(b))), b);
}

// A tiny vocabulary: all 256 byte symbols, then merged tokens.
nlohmann::json tiny_json(nlohmann::json merges) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 1;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    unicode::utf8_append(s, byte_to_unicode(static_cast<std::uint8_t>(b)));
    vocab[s] = id++;
  }
  for (const char* t : {"ab", "bc", "abc", "Ġa", "Ġab"}) vocab[t] = id++;
  return {{"added_tokens", {{{"id", 0}, {"content", "<s>"}, {"special", true}}}},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

TEST(Tokenizer, MergesApplyByRank) {
  // "b c" outranks "a b": "abc" -> a + bc; with the ranks swapped -> ab + c -> abc.
  auto t1 = Tokenizer::from_tokenizer_json(tiny_json({"b c", "a b", "ab c"}), "t1");
  auto t2 = Tokenizer::from_tokenizer_json(tiny_json({"a b", "b c", "ab c"}), "t2");
  const auto a = t1.encode("abc"), b = t2.encode("abc");
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(t1.token(a[0]), "a");
  EXPECT_EQ(t1.token(a[1]), "bc");
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(t2.token(b[0]), "abc");
  EXPECT_EQ(t2.decode(b), "abc");
}

TEST(Tokenizer, AddedTokensAndRoundTrip) {
  auto t = Tokenizer::from_tokenizer_json(tiny_json(nlohmann::json::array({nlohmann::json::array({"Ġ", "a"}), nlohmann::json::array({"Ġa", "b"})})), "t");
  const auto ids = t.encode("x<s> ab<s>");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(t.token(ids[2]), "Ġab");
  EXPECT_EQ(t.decode(ids), "x<s> ab<s>");
  const std::string text = "tab\there ünï 😀 \x01";
  EXPECT_EQ(t.decode(t.encode(text)), text);
  // Writing and re-reading tokenizer.json keeps the behaviour.
  auto back = Tokenizer::from_tokenizer_json(t.to_tokenizer_json(), "rt");
  EXPECT_EQ(back.encode(text), t.encode(text));
  EXPECT_EQ(back.vocab_size(), t.vocab_size());
}

TEST(Tokenizer, Qwen2PipelineRoundTrips) {
  auto j = tiny_json({"a b", "Ġ a"});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", kQwen2Pattern}}}, {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
  auto t = Tokenizer::from_tokenizer_json(j, "q");
  EXPECT_EQ(t.pre_tokenizer(), PreTokenizer::Qwen2);
  auto back = Tokenizer::from_tokenizer_json(t.to_tokenizer_json(), "rt");
  EXPECT_EQ(back.pre_tokenizer(), PreTokenizer::Qwen2);
  const std::string text = "ab 12 a\n\n  b";
  EXPECT_EQ(back.encode(text), t.encode(text));
  // One character off the pattern is not Qwen2's pipeline, and is refused.
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(kQwen2Pattern) + "|x";
  EXPECT_THROW(Tokenizer::from_tokenizer_json(j, "q"), Error);
}

TEST(Tokenizer, RejectsWhatItCannotDo) {
  auto j = tiny_json({"a b"});
  j["model"]["merges"] = {"a zz"};
  EXPECT_THROW(Tokenizer::from_tokenizer_json(j, "t"), Error);
  j = tiny_json({"a b"});
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  EXPECT_THROW(Tokenizer::from_tokenizer_json(j, "t"), Error);
  j = tiny_json({"a b"});
  j["model"]["byte_fallback"] = true;
  EXPECT_THROW(Tokenizer::from_tokenizer_json(j, "t"), Error);
  EXPECT_THROW(Tokenizer::from_tokenizer_json(nlohmann::json::object(), "t"), Error);
}

// The parts a GGUF file's metadata is read into build the same tokenizer as
// the tokenizer.json that holds them, and a special id outside is refused.
TEST(Tokenizer, FromPartsMatchesTheJsonOfTheSameParts) {
  const Tokenizer from_json = Tokenizer::from_tokenizer_json(tiny_json({"a b"}), "t");
  TokenizerParts parts;
  parts.pre = from_json.pre_tokenizer();
  for (std::size_t i = 0; i < from_json.vocab_size(); ++i) parts.tokens.push_back(from_json.token(static_cast<std::int32_t>(i)));
  parts.added = from_json.added_tokens();
  parts.merges = {{"a", "b"}};
  const Tokenizer from_parts = Tokenizer::from_parts(parts, "parts");
  EXPECT_EQ(from_parts.to_tokenizer_json(), from_json.to_tokenizer_json());
  EXPECT_EQ(from_parts.encode("ab ba"), from_json.encode("ab ba"));
  parts.special.eos = static_cast<std::int32_t>(parts.tokens.size());
  EXPECT_THROW(Tokenizer::from_parts(parts, "parts"), Error);
}

TEST(ImportGguf, TensorNames) {
  EXPECT_EQ(hf_llama_tensor_name("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(hf_llama_tensor_name("blk.12.attn_k.weight"), "model.layers.12.self_attn.k_proj.weight");
  EXPECT_EQ(hf_llama_tensor_name("blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(hf_llama_tensor_name("blk.3.attn_q.bias"), "model.layers.3.self_attn.q_proj.bias");
  EXPECT_FALSE(hf_llama_tensor_name("rope_freqs.weight"));
  EXPECT_FALSE(hf_llama_tensor_name("blk.x.attn_q.weight"));
}

TEST(ImportGguf, UnpermuteQkRows) {
  // 2 heads of dim 4, rows of length 1: GGUF row 2j+s of a head is HF row s*2+j.
  std::vector<float> w = {0, 1, 2, 3, 10, 11, 12, 13};
  unpermute_qk_rows(w, 8, 1, 2);
  EXPECT_EQ(w, (std::vector<float>{0, 2, 1, 3, 10, 12, 11, 13}));
  std::vector<float> bad(6);
  EXPECT_THROW(unpermute_qk_rows(bad, 6, 1, 2), Error);
}

}  // namespace
}  // namespace selq::runtime

// selq synth's tokenizer for runnable synthetic checkpoints: one token per
// byte, any text, and back.
TEST(Tokenizer, ByteLevelJsonEncodesEachByte) {
  const auto tok = selq::runtime::Tokenizer::from_tokenizer_json(selq::runtime::Tokenizer::byte_level_json(), "bytes");
  const std::string text = "The mill, 1923 \xC3\x9C\x6E\xC3\xAF \xF0\x9F\x99\x82\n\ttabs  and  spaces";
  const auto ids = tok.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(text[i])) << i;
  EXPECT_EQ(tok.decode(ids), text);
}
