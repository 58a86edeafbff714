// The rounding rows (quant/rounding_traits.h): names both ways, what each
// needs and how its scales are chosen, the kinds it takes and the refusal.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "quant/rounding_traits.h"
#include "quant/scheme_traits.h"

using namespace selq;
using namespace selq::quant;

TEST(RoundingTraits, NamesBothWaysAndUnknownOnesListed) {
  for (const auto& t : all_rounding_traits()) {
    EXPECT_EQ(parse_rounding(t.name, "rounding"), t.rounding) << t.name;
    EXPECT_STREQ(rounding_name(t.rounding), t.name);
  }
  EXPECT_EQ(parse_rounding("nearest", "rounding"), Rounding::Nearest);
  EXPECT_EQ(parse_rounding("gptq", "rounding"), Rounding::Gptq);
  EXPECT_EQ(rounding_names_text(), "nearest, mse, weighted, gptq");
  try {
    parse_rounding("stochastic", "--rounding");
    FAIL() << "stochastic";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("unknown --rounding 'stochastic' (expected one of: nearest, mse, weighted, "
                                         "gptq)"),
              std::string::npos)
        << e.what();
  }
}

// What the kernels and the pipeline ask of each row.
TEST(RoundingTraits, InputsAndScaleChoices) {
  EXPECT_EQ(rounding_input(Rounding::Nearest), RoundingInput::None);
  EXPECT_EQ(rounding_input(Rounding::Mse), RoundingInput::None);
  EXPECT_EQ(rounding_input(Rounding::Weighted), RoundingInput::InputMoments);
  EXPECT_EQ(rounding_input(Rounding::Gptq), RoundingInput::ModelPass);
  EXPECT_EQ(scale_choice(Rounding::Nearest), ScaleChoice::Rule);
  EXPECT_EQ(scale_choice(Rounding::Mse), ScaleChoice::Searched);
  EXPECT_EQ(scale_choice(Rounding::Weighted), ScaleChoice::Searched);
  EXPECT_EQ(scale_choice(Rounding::Gptq), ScaleChoice::Given);
  // Where its input is missing a rounding falls to one that needs none.
  for (const auto& t : all_rounding_traits())
    EXPECT_EQ(rounding_input(t.without_input), RoundingInput::None) << t.name;
}

// gptq takes exactly the kinds whose rows have a per-element grid with the
// scales kept; the others take every kind. The refusal names the rule's way out.
TEST(RoundingTraits, KindsTakenAndTheRefusal) {
  for (const auto& s : all_scheme_traits()) {
    EXPECT_EQ(rounding_takes(Rounding::Gptq, s.kind), s.gptq_keeps_scales);
    for (Rounding r : {Rounding::Nearest, Rounding::Mse, Rounding::Weighted}) EXPECT_TRUE(rounding_takes(r, s.kind));
  }
  SchemeSpec fp8{.kind = SchemeKind::FP8Channel};
  fp8.rounding.value = Rounding::Gptq;
  try {
    check_rounding_supported(fp8, "model.layers.0.mlp.down_proj.weight");
    FAIL() << "gptq on fp8-channel";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    const std::string w = e.what();
    EXPECT_NE(w.find("rounding 'gptq' is implemented for mxfp4, mxfp8, nvfp4 and int schemes, not fp8-channel; "
                     "give this rule `rounding: mse`"),
              std::string::npos)
        << w;
    EXPECT_NE(w.find("down_proj"), std::string::npos) << w;
  }
  SchemeSpec nv{.kind = SchemeKind::NVFP4};
  nv.rounding.value = Rounding::Gptq;
  EXPECT_NO_THROW(check_rounding_supported(nv, "t"));
}

// --rounding's help has every row's name and line, wrapped at 100 columns.
TEST(RoundingTraits, HelpHasEveryRowWrapped) {
  const std::string help = rounding_help_text();
  std::string unwrapped;  // the lines joined back, continuation indents dropped
  for (std::size_t at = 0; at < help.size();) {
    const std::size_t nl = std::min(help.find('\n', at), help.size());
    const std::string line = help.substr(at, nl - at);
    EXPECT_LE(line.size(), 100u) << line;
    if (line.rfind("    ", 0) == 0) {
      unwrapped.append(" ").append(line, 4);
    } else {
      if (!unwrapped.empty()) unwrapped.append("\n");
      unwrapped.append(line);
    }
    at = nl + 1;
  }
  for (const auto& t : all_rounding_traits())
    EXPECT_NE(unwrapped.find(std::string("  ") + t.name + ": " + t.help), std::string::npos) << t.name << "\n"
                                                                                            << unwrapped;
}
