#pragma once
// Named texts from installed packages, for calibration and for evaluation on
// text the calibration never saw (docs/QUALITY.md, "Text sources"). Each row
// is a name, a domain, where it comes from and how to install it; the reader
// turns the package's files into plain UTF-8 text, the same bytes on every
// machine with the same package versions. No network at run time.
//
//   prose           austen/<novel> (r-cran-janeaustenr), melville/moby-dick (r-cran-tokenizers)
//   code            code/python (the Python standard library), code/cpp (libstdc++'s headers)
//   technical prose manpages (Linux man-pages: the manpages and manpages-dev packages)
//   encyclopedia    foldoc (the Free On-line Dictionary of Computing, dict-foldoc)
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/text/default_text.h"

namespace selq::runtime {

struct TextSourceInfo {
  std::string name;     // "code/python"
  std::string domain;   // "prose", "code", "technical prose", "encyclopedia"
  std::string what;     // one line: the text and its author
  std::string install;  // how a user gets it (scripts/setup.sh does)
};

// Every source, in a fixed order.
const std::vector<TextSourceInfo>& text_sources();

// Whether the source's files are on this machine (cheap: no reading).
bool text_source_available(const std::string& name);

// The source's text, at most about `max_bytes` (0: all of it), cut at a line
// end. Files of a multi-file source are read in a fixed pseudo-random order of
// their relative paths, so a prefix samples the whole collection. Throws
// BadInput for an unknown name (listing the known ones) or a source that is
// not installed (saying how to install it).
DefaultText read_text_source(const std::string& name, std::size_t max_bytes = 0);

// ---- building blocks (tested on their own) ----

// A man page's roff source as plain text: requests and comments dropped,
// section headings and font macros' words kept, escapes resolved to the
// characters they stand for.
std::string roff_to_text(const std::string& roff);

// FOLDOC's dictd data as prose: each entry's paragraphs (its indented lines,
// joined), cross-reference braces removed, reference and URL lines and
// paragraphs under 80 bytes left out.
std::string foldoc_to_text(const std::string& dict);

// A Project Gutenberg e-book's body: between the "*** START OF" line and
// "End of Project Gutenberg" (the whole text when either is missing), with
// CRLF line ends made LF and a leading byte-order mark removed.
std::string gutenberg_body(const std::string& ebook);

}  // namespace selq::runtime
