#pragma once
// selq's default English text when no --text is given: Jane Austen's six
// novels (public domain), as Debian's r-cran-janeaustenr package ships them
// (scripts/setup.sh installs it). Evaluation, calibration and draft prompts
// never share a line:
//   evaluation  Emma
//   calibration a mix of Sense and Sensibility, Python's standard library and
//               Linux man-pages (runtime/text/calibration_text.h)
//   prompts     openings of paragraphs of Persuasion
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace selq::runtime {

struct DefaultText {
  std::string text;    // lines joined with '\n'
  std::string source;  // "Jane Austen, Emma (r-cran-janeaustenr: /usr/lib/R/.../Rdata.rdb)"
};

enum class DefaultTextUse { Evaluation, Calibration };

// The database file of the installed package, or "" when it is not installed.
// SELQ_JANEAUSTENR_DIR (the package's directory) overrides the search.
std::string find_janeaustenr_database();

// Throws BadInput saying how to install the package (or to pass --text) when
// it is not installed.
DefaultText default_text(DefaultTextUse use);

// `count` prompts: the first `words` words of successive paragraphs of at
// least that many words, each asking the model to continue the passage.
struct DefaultPrompts {
  std::vector<std::string> prompts;
  std::string source;
};
DefaultPrompts default_prompts(std::size_t count, std::size_t words = 40);

// What the commands read: the file when one is given, else the default.
DefaultText text_or_default(const std::string& path, DefaultTextUse use);

// Prompts: the "question" (else "prompt", else "text") field of each JSONL line.
std::vector<std::string> read_prompts_jsonl(const std::string& path, std::int64_t max_prompts);

// The six novels as (slug, title as the package has it, lower case):
// ("sense-and-sensibility", "sense and sensibility"), ...
const std::vector<std::pair<std::string, std::string>>& austen_novels();
// "sense and sensibility" -> "Sense and Sensibility".
std::string austen_display_title(const std::string& title);
// One novel by its lower-case title; BadInput when the package is not installed.
DefaultText austen_novel(const std::string& title);
// The prompts of a JSONL file (at most max_prompts, 0: all), else
// max_prompts default prompts (none when max_prompts <= 0).
DefaultPrompts prompts_or_default(const std::string& path, std::int64_t max_prompts);

// The calibration text when a user's own file is also the evaluation text:
// its last half, at most 16 KiB, starting at a line boundary (no UTF-8
// sequence is cut); the evaluation reads from the start, and `selq eval`
// refuses overlap (text_overlap.h). The source says which bytes.
DefaultText calibration_tail(const DefaultText& text);

// ---- building blocks (tested on their own) ----

// Paragraphs of a novel stored one line per element, blank elements between
// paragraphs; each paragraph's lines joined with spaces.
std::vector<std::string> paragraphs_of(const std::vector<std::string>& lines);

}  // namespace selq::runtime
