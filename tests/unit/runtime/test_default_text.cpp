// The default English text: which novel each use takes, the prompts made from
// a third one, the error without the package, and, where Debian's
// r-cran-janeaustenr is installed, the real novels.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "../r_lazyload_fixture.h"
#include "core/error.h"
#include "runtime/text/default_text.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;
using selq::testing::r_character_vector;
using selq::testing::r_lazyload_chunk;
using selq::testing::r_lines;

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A package directory with three "novels" in the order the real one has them.
class FakeJaneAustenR : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt_name();
    fs::create_directories(dir_ / "data");
    std::string db;
    db += r_lazyload_chunk(r_character_vector(r_lines({"EMMA", "", "VOLUME I", "", "Emma Woodhouse, handsome."})));
    std::vector<std::string> persuasion{"Persuasion", ""};
    for (int p = 0; p < 5; ++p) {
      std::string words;
      for (int w = 0; w < (p == 1 ? 10 : 45); ++w) words += fmt_word(p, w) + " ";
      const std::size_t cut = words.find(' ', words.size() / 2);  // two lines, split between words
      persuasion.push_back(words.substr(0, cut));
      persuasion.push_back(words.substr(cut + 1));
      persuasion.push_back("");
    }
    db += r_lazyload_chunk(r_character_vector(r_lines(persuasion)));
    db += r_lazyload_chunk(r_character_vector(r_lines({"SENSE AND SENSIBILITY", "", "The family of Dashwood."})));
    selq::testing::write_binary((dir_ / "data" / "Rdata.rdb").string(), db);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static std::string fmt_name() { return fmt::format("selq-janeaustenr-{}", ::getpid()); }
  static std::string fmt_word(int p, int w) { return fmt::format("p{}w{}", p, w); }
  fs::path dir_;
};

TEST_F(FakeJaneAustenR, EachUseTakesItsNovel) {
  ScopedEnv env("SELQ_JANEAUSTENR_DIR", dir_.string());
  auto eval = default_text(DefaultTextUse::Evaluation);
  EXPECT_EQ(eval.text, "EMMA\n\nVOLUME I\n\nEmma Woodhouse, handsome.\n");
  EXPECT_NE(eval.source.find("Jane Austen, Emma (r-cran-janeaustenr: "), std::string::npos) << eval.source;
  // Calibration: the mix, whose first chunk is the (here short) Sense and Sensibility.
  auto cal = default_text(DefaultTextUse::Calibration);
  EXPECT_EQ(cal.text.rfind("SENSE AND SENSIBILITY\n\nThe family of Dashwood.\n", 0), 0u) << cal.text.substr(0, 200);
  EXPECT_NE(cal.source.find("austen/sense-and-sensibility: Jane Austen, Sense and Sensibility"), std::string::npos)
      << cal.source;
  EXPECT_NE(cal.source.find("code/python: "), std::string::npos) << cal.source;
  EXPECT_NE(cal.source.find("manpages: "), std::string::npos) << cal.source;
}

TEST_F(FakeJaneAustenR, PromptsAreParagraphOpeningsOfPersuasion) {
  ScopedEnv env("SELQ_JANEAUSTENR_DIR", dir_.string());
  auto p = default_prompts(3, 40);
  ASSERT_EQ(p.prompts.size(), 3u);
  // Paragraph 1 has 10 words and is skipped; each prompt has exactly 40 words of its paragraph.
  EXPECT_EQ(p.prompts[0].rfind("Continue this passage from a novel: p0w0 p0w1 ", 0), 0u) << p.prompts[0];
  EXPECT_NE(p.prompts[0].find(" p0w39"), std::string::npos);
  EXPECT_EQ(p.prompts[0].find("p0w40"), std::string::npos);
  EXPECT_NE(p.prompts[1].find("p2w0 "), std::string::npos);
  EXPECT_NE(p.prompts[2].find("p3w0 "), std::string::npos);
  EXPECT_NE(p.source.find("Persuasion"), std::string::npos);
  EXPECT_EQ(default_prompts(100, 40).prompts.size(), 4u);  // all there are
}

TEST(DefaultText, MissingPackageSaysHowToInstallIt) {
  ScopedEnv env("SELQ_JANEAUSTENR_DIR", "/nonexistent/janeaustenr");
  try {
    default_text(DefaultTextUse::Evaluation);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("r-cran-janeaustenr"), std::string::npos) << e.what();
    // The library names no option; the CLI and Python say how to give a text (ErrorHint).
    EXPECT_EQ(std::string(e.what()).find("--text"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint(), ErrorHint::TextFile);
  }
}

TEST(DefaultText, ParagraphsJoinLinesAndSplitOnBlankLines) {
  EXPECT_EQ(paragraphs_of({"", "a b", "c", "  ", "", "d", ""}), (std::vector<std::string>{"a b c", "d"}));
  EXPECT_TRUE(paragraphs_of({}).empty());
}

// The installed package (scripts/setup.sh installs it): enough prose, and
// evaluation, calibration and prompts share no paragraph.
TEST(DefaultText, InstalledNovelsAreLargeAndDisjoint) {
  ASSERT_FALSE(find_janeaustenr_database().empty())
      << "Debian's r-cran-janeaustenr is not installed: `scripts/setup.sh demo` installs it";
  auto eval = default_text(DefaultTextUse::Evaluation);
  auto cal = default_text(DefaultTextUse::Calibration);
  EXPECT_GT(eval.text.size(), 800'000u);
  EXPECT_GT(cal.text.size(), 300'000u);  // the mix: 128 KiB of each of its three sources
  EXPECT_EQ(eval.text.rfind("EMMA\n", 0), 0u);
  auto prompts = default_prompts(64);
  ASSERT_EQ(prompts.prompts.size(), 64u);
  std::set<std::string> eval_lines;
  for (std::size_t a = 0, b; (b = eval.text.find('\n', a)) != std::string::npos; a = b + 1)
    if (b - a > 40) eval_lines.insert(eval.text.substr(a, b - a));
  std::size_t shared = 0;
  for (std::size_t a = 0, b; (b = cal.text.find('\n', a)) != std::string::npos; a = b + 1)
    shared += eval_lines.count(cal.text.substr(a, b - a));
  EXPECT_EQ(shared, 0u);
  for (const auto& p : prompts.prompts) {
    const std::string passage = p.substr(p.find(": ") + 2, 60);
    EXPECT_EQ(eval.text.find(passage), std::string::npos) << passage;
    EXPECT_EQ(cal.text.find(passage), std::string::npos) << passage;
  }
}

TEST(DefaultText, CalibrationTailStartsAtALineInTheSecondHalf) {
  std::string t;
  for (int i = 0; i < 3000; ++i) t += fmt::format("line {} of the text, é\n", i);  // ~75 KB
  const auto tail = calibration_tail({t, "f.txt"});
  EXPECT_LE(tail.text.size(), 16384u);
  EXPECT_GT(tail.text.size(), 16000u);
  ASSERT_EQ(t.compare(t.size() - tail.text.size(), tail.text.size(), tail.text), 0);  // a suffix
  EXPECT_EQ(t[t.size() - tail.text.size() - 1], '\n');                                 // from a line start
  EXPECT_EQ(tail.source, fmt::format("last {} bytes of f.txt", tail.text.size()));
  const auto small = calibration_tail({"a\nbb\nccc\ndddd\n", "s"});
  EXPECT_EQ(small.text, "dddd\n");  // never more than half
}

}  // namespace
}  // namespace selq::runtime
