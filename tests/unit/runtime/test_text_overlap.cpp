// Text provenance: runs of 16 words are fingerprinted across line breaks and
// spacing, a calibration's runs are found in an evaluation text, and the
// error names the offset of the first shared word.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/text/text_overlap.h"

namespace selq::runtime {
namespace {

std::string words(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) s += fmt::format("{}w{}", s.empty() ? "" : " ", i);
  return s;
}

TEST(TextOverlap, ShinglesOfSixteenWordsWithOffsets) {
  EXPECT_TRUE(word_shingles(words(0, 15)).empty());
  const std::string t = words(0, 18);  // 3 runs of 16
  auto s = word_shingles(t);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].offset, 0u);
  EXPECT_EQ(s[1].offset, t.find("w1 "));
  EXPECT_EQ(s[2].offset, t.find("w2 "));
  // Line breaks and extra spaces do not change a run's fingerprint.
  std::string broken = words(0, 8) + "\n  " + words(8, 16) + "\t\n";
  EXPECT_EQ(word_shingles(broken)[0].hash, word_shingles(words(0, 16))[0].hash);
}

TEST(TextOverlap, ProvenanceRecordsBytesAndUniqueShingles) {
  const std::string consumed = words(0, 16) + "\n" + words(0, 16);
  auto p = text_provenance("novel.txt", consumed);
  EXPECT_EQ(p["source"], "novel.txt");
  EXPECT_EQ(p["bytes"], nlohmann::json::array({0, consumed.size()}));
  EXPECT_EQ(p["shingle_words"], 16);
  EXPECT_EQ(p["shingle_xxh3"].size(), 16u);  // 17 runs, the first repeats at the end
}

TEST(TextOverlap, SharedRunIsOneErrorWithItsOffset) {
  // The calibration read words 100-140; the evaluation text cuts into them mid-line.
  const auto cal = text_provenance("calib.txt", words(100, 140));
  const std::string eval = words(0, 30) + "\n" + words(120, 137) + "\n";
  try {
    require_disjoint(eval, "eval.txt", cal, "out/nvfp4");
    FAIL() << "expected an overlap error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_EQ(e.where().file, "eval.txt");
    EXPECT_EQ(e.where().offset, std::optional<std::uint64_t>(eval.find("w120")));
    EXPECT_NE(std::string(e.what()).find("out/nvfp4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("calib.txt"), std::string::npos) << e.what();
  }
  // 15 shared words are not an overlap; neither is a manifest without fingerprints.
  EXPECT_NO_THROW(require_disjoint(words(0, 30) + " " + words(120, 135), "eval.txt", cal, "out/nvfp4"));
  EXPECT_NO_THROW(require_disjoint(eval, "eval.txt", nlohmann::json::object(), "old manifest"));
}

}  // namespace
}  // namespace selq::runtime
