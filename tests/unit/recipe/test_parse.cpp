#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "recipe/names.h"
#include "recipe/recipe.h"

namespace selq::recipe {
namespace {

using quant::ActMode;
using quant::SchemeKind;

// Parses `text` expecting a BadInput error; returns the full message.
std::string parse_error(const std::string& text) {
  try {
    parse_recipe(text, "r.yaml");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    return e.what();
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return {};
}

#define EXPECT_HAS(haystack, needle) EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)

// `dialect:` is kept as written with its place; the plan checks it against
// export's list (a new dialect touches export/ only: test_plan_layout).
TEST(RecipeParse, DialectIsKeptAsWrittenWithItsPlace) {
  const Recipe r = parse_recipe("name: x\ndialect: quark\n", "r.yaml");
  EXPECT_EQ(r.dialect, "quark");
  EXPECT_EQ(where_text(r.dialect_where), "r.yaml:2:10");
  EXPECT_HAS(parse_error("name: x\ndialect: [quark]\n"), "dialect must be a string");
}

TEST(RecipeParse, MinimalRecipe) {
  Recipe r = parse_recipe("name: x\n", "r.yaml");
  EXPECT_EQ(r.name, "x");
  EXPECT_EQ(r.dialect, "compressed-tensors");
  EXPECT_TRUE(r.rules.empty());
  EXPECT_FALSE(r.default_scheme);
  EXPECT_EQ(r.text, "name: x\n");
  EXPECT_EQ(r.path, "r.yaml");
}

TEST(RecipeParse, FullRecipeFields) {
  const char* text =
      "name: mix\n"
      "arch: dspark\n"
      "dialect: quark\n"
      "serving: {kv_cache: fp8, prefill_query_quant: true}\n"
      "exclude: ['@heads', 're:.*markov_head.*']\n"
      "rules:\n"
      "  - match: model.layers.*.self_attn.o_proj\n"
      "    scheme: mxfp4\n"
      "    options: {scale_rule: rceil, activations: mxfp4-dynamic}\n"
      "  - match: ['@mlp', '*.q_b_proj']\n"
      "    scheme: fp8-channel\n"
      "    options: {activations: fp8-per-token, scale_dtype: bf16, scale_keepdim: false}\n"
      "default: {scheme: int4, options: {group_size: 128, symmetric: false, pack_int32: true}}\n";
  Recipe r = parse_recipe(text, "r.yaml");
  EXPECT_EQ(r.arch, "dspark");
  EXPECT_EQ(r.dialect, "quark");
  EXPECT_TRUE(r.fp8_kv_cache);
  EXPECT_TRUE(r.fp8_prefill_query);
  ASSERT_EQ(r.exclude.size(), 2u);
  EXPECT_EQ(r.exclude[1].text, "re:.*markov_head.*");
  EXPECT_EQ(r.exclude[1].where.line, 5);
  EXPECT_EQ(r.exclude[1].where.column, 21);
  ASSERT_EQ(r.rules.size(), 2u);
  EXPECT_EQ(r.rules[0].where.line, 7);
  EXPECT_EQ(r.rules[0].where.column, 5);
  ASSERT_EQ(r.rules[0].match.size(), 1u);  // a single string is a one-pattern list
  EXPECT_EQ(r.rules[0].scheme.kind, SchemeKind::MXFP4);
  EXPECT_EQ(r.rules[0].scheme.act, ActMode::MXFP4Dynamic);
  EXPECT_EQ(r.rules[0].scheme.scale_rule, ScaleRule::RCeil);
  EXPECT_EQ(r.rules[1].match.size(), 2u);
  EXPECT_EQ(r.rules[1].scheme.kind, SchemeKind::FP8Channel);
  EXPECT_EQ(r.rules[1].scheme.act, ActMode::FP8PerToken);
  EXPECT_EQ(r.rules[1].scheme.scale_dtype, DType::BF16);
  EXPECT_FALSE(r.rules[1].scheme.scale_keepdim);
  ASSERT_TRUE(r.default_scheme);
  EXPECT_EQ(r.default_scheme->kind, SchemeKind::IntGroup);
  EXPECT_EQ(r.default_scheme->bits, 4);
  EXPECT_EQ(r.default_scheme->group_size, 128);
  EXPECT_FALSE(r.default_scheme->symmetric);
  EXPECT_TRUE(r.default_scheme->int_pack_int32);
}

TEST(RecipeParse, SchemeNamesAndOptions) {
  auto one = [](const std::string& scheme_and_options) {
    Recipe r = parse_recipe("name: x\nrules:\n  - match: a\n" + scheme_and_options, "r.yaml");
    return r.rules.at(0);
  };
  EXPECT_EQ(one("    scheme: mxfp8\n").scheme.kind, SchemeKind::MXFP8);
  EXPECT_EQ(one("    scheme: nvfp4\n    options: {activations: nvfp4}\n").scheme.act, ActMode::NVFP4);
  EXPECT_EQ(one("    scheme: fp8-tensor\n    options: {activations: fp8-static}\n").scheme.act,
            ActMode::FP8StaticTensor);
  auto block = one("    scheme: fp8-block\n    options: {block_size: [128, 64], activations: fp8-per-token-group128}\n");
  EXPECT_EQ(block.scheme.kind, SchemeKind::FP8Block);
  EXPECT_EQ(block.scheme.block_rows, 128);
  EXPECT_EQ(block.scheme.block_cols, 64);
  EXPECT_EQ(block.scheme.act, ActMode::FP8PerTokenGroup128);
  EXPECT_EQ(one("    scheme: fp8-block\n    options: {block_size: 64}\n").scheme.block_cols, 64);
  auto i8 = one("    scheme: int8\n    options: {group_size: -1}\n");
  EXPECT_EQ(i8.scheme.kind, SchemeKind::IntChannel);
  EXPECT_EQ(i8.scheme.bits, 8);
  EXPECT_EQ(one("    scheme: int4\n").scheme.kind, SchemeKind::IntChannel);
  EXPECT_TRUE(one("    scheme: keep\n").keep);
  EXPECT_EQ(one("    scheme: mxfp4\n    options: {activations: fp8-dynamic-tensor, scale_rule: floor}\n").scheme.act,
            ActMode::FP8DynamicTensor);
  EXPECT_EQ(one("    scheme: mxfp4\n    options: {activations: mxfp8-dynamic, scale_rule: ceil}\n").scheme.scale_rule,
            ScaleRule::Ceil);
}

TEST(RecipeParse, UnknownTopLevelKeyNamesLineAndColumn) {
  const std::string msg = parse_error("name: x\nrulez: []\n");
  EXPECT_HAS(msg, "r.yaml:2:1:");
  EXPECT_HAS(msg, "unknown key 'rulez'");
}

TEST(RecipeParse, UnknownSchemeNamesItsPosition) {
  const std::string msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp5\n");
  EXPECT_HAS(msg, "r.yaml:4:13:");
  EXPECT_HAS(msg, "unknown scheme 'mxfp5'");
}

TEST(RecipeParse, UnknownOptionKeyAndValue) {
  std::string msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options: {dither: even}\n");
  EXPECT_HAS(msg, "r.yaml:5:15:");
  EXPECT_HAS(msg, "unknown key 'dither'");
  // rounding is a key (docs/RECIPES.md, "Rounding"); its values are checked
  msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options: {rounding: even}\n");
  EXPECT_HAS(msg, "r.yaml:5:25:");
  EXPECT_HAS(msg, "unknown rounding 'even' (expected one of: nearest, mse, weighted, gptq)");
  msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options:\n      activations: fp4\n");
  EXPECT_HAS(msg, "r.yaml:6:20:");
  EXPECT_HAS(msg, "unknown activations 'fp4'");
}

TEST(RecipeParse, OptionForAnotherScheme) {
  std::string msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: fp8-channel\n    options: {scale_rule: even}\n");
  EXPECT_HAS(msg, "r.yaml:5:15:");
  EXPECT_HAS(msg, "does not apply to scheme 'fp8-channel'");
  msg = parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options: {group_size: 32}\n");
  EXPECT_HAS(msg, "does not apply");
}

TEST(RecipeParse, Nvfp4ActivationPairing) {
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: nvfp4\n    options: {activations: fp8-per-token}\n"),
             "nvfp4 weights take");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options: {activations: nvfp4}\n"),
             "need scheme nvfp4");
}

TEST(RecipeParse, BadValuesAreErrors) {
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: int4\n    options: {group_size: 0}\n"), "group_size");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: int4\n    options: {symmetric: maybe}\n"),
             "true or false");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: fp8-block\n    options: {block_size: [1, 2, 3]}\n"),
             "block_size");
  EXPECT_HAS(parse_error("name: x\nserving: {kv_cache: int4}\n"), "r.yaml:2:21:");
  EXPECT_HAS(parse_error("name: x\narch: gpt9\n"), "r.yaml:2:7:");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n    scheme: keep\n    options: {activations: none}\n"),
             "takes no options");
}

TEST(RecipeParse, MissingFields) {
  EXPECT_HAS(parse_error("arch: llama\n"), "'name'");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - scheme: mxfp4\n"), "r.yaml:3:5:");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: a\n"), "rule needs 'scheme'");
  EXPECT_HAS(parse_error("name: x\nrules:\n  - match: []\n    scheme: mxfp4\n"), "no pattern");
  EXPECT_HAS(parse_error("name: x\ndefault: {options: {}}\n"), "default needs 'scheme'");
  EXPECT_HAS(parse_error("name: x\nrules: {a: 1}\n"), "rules must be a list");
  EXPECT_HAS(parse_error("- 1\n- 2\n"), "mapping");
}

TEST(RecipeParse, DuplicateKey) {
  EXPECT_HAS(parse_error("name: x\nname: y\n"), "duplicate key 'name'");
}

TEST(RecipeParse, YamlSyntaxErrorHasPosition) {
  const std::string msg = parse_error("name: x\nrules: [\n  - {match: a\n");
  EXPECT_HAS(msg, "r.yaml:");
  EXPECT_HAS(msg, "invalid YAML");
}

TEST(RecipeParse, PatternValidation) {
  std::string msg = parse_error("name: x\nexclude: ['re:model.(']\n");
  EXPECT_HAS(msg, "r.yaml:2:11:");
  EXPECT_HAS(msg, "invalid regular expression");
  msg = parse_error("name: x\narch: llama\nexclude: ['@experts']\n");
  EXPECT_HAS(msg, "r.yaml:3:11:");
  EXPECT_HAS(msg, "unknown template '@experts' for arch 'llama'");
  EXPECT_HAS(parse_error("name: x\nexclude: ['@attention']\n"), "needs a known 'arch'");
  EXPECT_HAS(parse_error("name: x\nexclude: ['@layer:x']\n"), "@layer:N");
  // @layer:N needs no arch.
  EXPECT_NO_THROW(parse_recipe("name: x\nexclude: ['@layer:3']\n", "r.yaml"));
}

TEST(RecipeParse, LoadMissingFileIsIoError) {
  try {
    load_recipe("/nonexistent/recipe.yaml");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
  }
}

TEST(RecipeParse, DescribeScheme) {
  Recipe r = parse_recipe("name: x\nrules:\n  - match: a\n    scheme: mxfp4\n    options: {activations: mxfp4-dynamic}\n",
                          "r.yaml");
  EXPECT_EQ(describe_scheme(r.rules[0].scheme), "mxfp4 + mxfp4-dynamic activations");
}

TEST(Glob, FnmatchSemantics) {
  using detail::glob_match;
  EXPECT_TRUE(glob_match("model.layers.*.self_attn.o_proj", "model.layers.12.self_attn.o_proj"));
  // `*` crosses dots, as in Python's fnmatch.
  EXPECT_TRUE(glob_match("*.o_proj", "model.layers.12.self_attn.o_proj"));
  EXPECT_TRUE(glob_match("model.*.o_proj", "model.layers.1.self_attn.o_proj"));
  EXPECT_FALSE(glob_match("*.o_proj", "model.layers.1.self_attn.o_proj.weight"));
  EXPECT_FALSE(glob_match("*v_proj", "model.layers.1.self_attn.kv_b_proj"));
  EXPECT_TRUE(glob_match("model.layers.?.mlp", "model.layers.7.mlp"));
  EXPECT_FALSE(glob_match("model.layers.?.mlp", "model.layers.17.mlp"));
  EXPECT_TRUE(glob_match("model.layers.[0-2].mlp", "model.layers.2.mlp"));
  EXPECT_FALSE(glob_match("model.layers.[0-2].mlp", "model.layers.3.mlp"));
  EXPECT_TRUE(glob_match("model.layers.[!0].mlp", "model.layers.3.mlp"));
  EXPECT_FALSE(glob_match("model.layers.[!0].mlp", "model.layers.0.mlp"));
  EXPECT_TRUE(glob_match("a[b", "a[b"));  // unclosed class is literal
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("**a*", "xxaxx"));
  EXPECT_FALSE(glob_match("", "a"));
}

TEST(NameInfo, LayerIndexOnlyFromTheDecoderStack) {
  detail::NameInfo a("model.layers.12.self_attn.o_proj");
  EXPECT_EQ(a.layer, 12);
  ASSERT_EQ(a.rest_size(), 2u);
  EXPECT_EQ(a.rest(1), "o_proj");
  EXPECT_EQ(detail::NameInfo("language_model.model.layers.3.mlp.gate").layer, 3);
  EXPECT_EQ(detail::NameInfo("vision_tower.encoder.layers.3.attn.qkv").layer, -1);
  EXPECT_EQ(detail::NameInfo("lm_head").layer, -1);
}

TEST(RecipeParse, RotationAndItsBlock) {
  const auto r = parse_recipe("name: r\nrotation: r1r2\nrotation_block: 32\ndefault: {scheme: nvfp4}\n", "r.yaml");
  EXPECT_EQ(r.rotation, "r1r2");
  EXPECT_EQ(r.rotation_block, 32);
  EXPECT_EQ(parse_recipe("name: r\ndefault: {scheme: nvfp4}\n", "r.yaml").rotation, "");
  EXPECT_NE(parse_error("name: r\nrotation: r3\n").find("unknown rotation 'r3'"), std::string::npos);
  EXPECT_NE(parse_error("name: r\nrotation_block: -2\n").find("rotation_block"), std::string::npos);
  // The CLI's --rotation and --rotation-block become the recipe's own lines (the manifest's text says so).
  const auto plain = parse_recipe("name: r\ndefault: {scheme: nvfp4}\n", "r.yaml");
  const auto rot = with_rotation_block(with_rotation(plain, "r1"), 32);
  EXPECT_EQ(rot.rotation, "r1");
  EXPECT_EQ(rot.rotation_block, 32);
  EXPECT_NE(rot.text.find("rotation: r1"), std::string::npos);
  EXPECT_EQ(with_rotation(plain, "none").text, plain.text);
  EXPECT_THROW(with_rotation(r, "r1"), Error);          // the recipe says r1r2
  EXPECT_THROW(with_rotation_block(r, 16), Error);      // and blocks of 32
  EXPECT_EQ(with_rotation(r, "r1r2").text, r.text);
}

}  // namespace
}  // namespace selq::recipe
