// Named texts of installed packages and the calibration mix: the converters
// on hand-made inputs (roff, FOLDOC's dictd data, a Gutenberg e-book), the mix's
// order and bytes, errors that name what is wrong, and, on this machine (which
// scripts/setup.sh test sets up), every source read for real.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/text/calibration_text.h"
#include "runtime/text/text_sources.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

TEST(RoffToText, KeepsTheWordsAndDropsTheRequests) {
  const std::string page =
      ".\\\" Copyright line, a comment\n"
      ".TH OPEN 2 2023-02-05 \"Linux man-pages 6.03\"\n"
      ".SH NAME\n"
      "open, creat \\- open and possibly create a file\n"
      ".SH DESCRIPTION\n"
      "The\n"
      ".BR open ()\n"
      "system call opens the file specified by\n"
      ".IR pathname .\n"
      ".PP\n"
      "A call to \\fBopen\\fP() creates a new \\fIopen file description\\fR\\(emsee below\\[aq]s.\n"
      ".IP \\[bu] 3\n"
      "first item\n"
      ".nf\n"
      "int fd = open(\"x\", O_RDONLY);\n";
  EXPECT_EQ(roff_to_text(page),
            "NAME\nopen, creat - open and possibly create a file\n\n"
            "DESCRIPTION\nThe\nopen ()\nsystem call opens the file specified by\npathname .\n\n"
            "A call to open() creates a new open file description\xE2\x80\x94see below's.\n\n"
            "\xE2\x80\xA2 first item\nint fd = open(\"x\", O_RDONLY);\n");
}

TEST(FoldocToText, ParagraphsOfEntriesWithoutMarkup) {
  const std::string dict =
      "00-database-info\n"
      "     This is the short info entry, under eighty bytes, left out.\n"
      "\n"
      "Free On-line Dictionary of Computing%%%FOLDOC\n"
      "\n"
      "   <introduction> The introduction: about the file, its licence and how to cite it, left out\n"
      "   however long it is, because it is not an entry of the dictionary.\n"
      "\n"
      "Ada\n"
      "\n"
      "     <language> A {Pascal}-descended language, designed by Jean Ichbiah's team at\n"
      "     CII Honeywell in 1979, made mandatory for Department of Defense software projects.\n"
      "\n"
      "     [Reference to a book, left out because it is a reference line of some length]\n"
      "\n"
      "     See http://example.org/ada for a long line with a URL, which is left out here.\n"
      "\n"
      "     The second paragraph of the entry is long enough to be kept in the text, being of\n"
      "     more than eighty bytes once its date is gone (2003-07-07)\n";
  EXPECT_EQ(foldoc_to_text(dict),
            "A Pascal-descended language, designed by Jean Ichbiah's team at CII Honeywell in 1979, made "
            "mandatory for Department of Defense software projects.\n\n"
            "The second paragraph of the entry is long enough to be kept in the text, being of more than eighty "
            "bytes once its date is gone\n");
}

TEST(GutenbergBody, BetweenTheMarkersWithLfLineEnds) {
  const std::string book =
      "\xEF\xBB\xBFThe Project Gutenberg eBook\r\nheader\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\n"
      "Call me Ishmael.\r\nSome years ago.\r\nEnd of Project Gutenberg's X\r\nlicense\r\n";
  EXPECT_EQ(gutenberg_body(book), "Call me Ishmael.\nSome years ago.\n");
  EXPECT_EQ(gutenberg_body("no markers\r\n"), "no markers\n");
}

TEST(MixTexts, ChunksInTurnCutAfterLineEnds) {
  std::string a, b;
  for (int i = 0; i < 10; ++i) a += fmt::format("a line {:02d}\n", i);  // 10 bytes a line
  for (int i = 0; i < 3; ++i) b += fmt::format("b{}\n", i);
  const DefaultText m = mix_texts({{a, "A"}, {b, "B"}}, 25);
  // A's chunks: 25 bytes then to the line end (30 bytes), B's whole (9 bytes) in its first turn.
  EXPECT_EQ(m.text, a.substr(0, 30) + b + a.substr(30, 30) + a.substr(60, 30) + a.substr(90));
  EXPECT_NE(m.source.find("A [100 bytes]; B [9 bytes]"), std::string::npos) << m.source;
  EXPECT_NE(m.source.find("chunks of 25 bytes"), std::string::npos) << m.source;
  EXPECT_NE(mix_texts({{a, "A"}, {b + "x", "B"}}, 25).source.substr(0, 80), m.source.substr(0, 80));  // the hash
}

TEST(CalibrationText, OneFileIsReadWholeAndAnUnknownInputIsNamed) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("selq-calib-{}", ::getpid());
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "a.txt") << "first file\n";
  std::ofstream(dir / "sub" / "b.txt") << "second file\n";
  EXPECT_EQ(calibration_text({(dir / "a.txt").string()}).text, "first file\n");
  EXPECT_EQ(calibration_text({dir.string()}).text, "first file\nsecond file\n");  // path order
  const DefaultText two = calibration_text({(dir / "a.txt").string(), (dir / "sub" / "b.txt").string()});
  EXPECT_EQ(two.text, "first file\nsecond file\n");
  try {
    calibration_text({(dir / "missing.txt").string()});
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("missing.txt' is no file, directory or text source"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(TextSources, AnUnknownNameListsTheKnownOnes) {
  try {
    read_text_source("austen/ulysses");
    FAIL() << "expected BadInput";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("no text source named 'austen/ulysses' (known: austen/sense-and-sensibility"),
              std::string::npos)
        << e.what();
  }
}

TEST(TextSources, AMissingPackageSaysHowToGetIt) {
  const char* old = std::getenv("SELQ_TEXTS_DIR");
  const std::string keep = old ? old : "";
  ::setenv("SELQ_TEXTS_DIR", "/nonexistent/selq-texts", 1);
  if (!fs::exists("/usr/share/dictd/foldoc.dict.dz")) {  // not installed system-wide
    EXPECT_FALSE(text_source_available("foldoc"));
    try {
      read_text_source("foldoc");
      FAIL() << "expected BadInput";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not installed: scripts/setup.sh test"), std::string::npos) << e.what();
    }
  }
  if (old) ::setenv("SELQ_TEXTS_DIR", keep.c_str(), 1);
  else ::unsetenv("SELQ_TEXTS_DIR");
}

// Every source on this machine (scripts/setup.sh test installs or unpacks them
// all): real text of its domain, a prefix when asked, and no two sharing a line.
TEST(TextSources, EverySourceIsInstalledAndReadsAsItsDomain) {
  const std::vector<std::pair<std::string, std::string>> marks{
      {"austen/emma", "Emma Woodhouse"},       {"austen/persuasion", "Kellynch"},
      {"melville/moby-dick", "Call me Ishmael"}, {"code/python", "def "},
      {"code/cpp", "template<"},               {"manpages", "DESCRIPTION"},
      {"foldoc", "programming language"}};
  std::map<std::string, std::set<std::string>> lines;
  for (const auto& [name, mark] : marks) {
    ASSERT_TRUE(text_source_available(name)) << name << " is not installed: run scripts/setup.sh test";
    const DefaultText t = read_text_source(name, 200'000);
    EXPECT_GT(t.text.size(), 150'000u) << name;
    EXPECT_LE(t.text.size(), 200'000u) << name;
    EXPECT_EQ(t.text.back(), '\n') << name;
    EXPECT_NE(t.text.find(mark), std::string::npos) << name;
    EXPECT_EQ(t.source.rfind(name + ": ", 0), 0u) << t.source;
    EXPECT_EQ(t.text.find("\\f"), std::string::npos) << name << ": a roff escape left";
    for (std::size_t a = 0, b; (b = t.text.find('\n', a)) != std::string::npos; a = b + 1)
      if (b - a > 60) lines[name].insert(t.text.substr(a, b - a));
  }
  // The held-out sources (and the default evaluation text) share no long line with the calibration mix.
  const DefaultText cal = calibration_text({});
  std::vector<std::string> held = held_out_sources();
  held.push_back("austen/emma");
  EXPECT_EQ(held.size(), 4u);
  std::size_t shared = 0;
  for (const auto& held_out : held)
    for (std::size_t a = 0, b; (b = cal.text.find('\n', a)) != std::string::npos; a = b + 1)
      shared += lines[held_out].count(cal.text.substr(a, b - a));
  EXPECT_EQ(shared, 0u);
  EXPECT_EQ(read_text_source("code/python", 10'000).text, read_text_source("code/python", 10'000).text);
}

}  // namespace
}  // namespace selq::runtime
