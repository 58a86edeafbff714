#include "runtime/text/text_sources.h"

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/r_lazyload.h"
#include "io/xxh3.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

// Where a package's files are: installed (under /), or unpacked by
// scripts/setup.sh into SELQ_TEXTS_DIR (default ~/.cache/selq/texts/PACKAGE/)
// for the packages whose Debian dependencies selq does not want (a dictionary
// server, R's tokenizers and their compiled dependencies).
std::vector<fs::path> package_roots(const std::string& package) {
  std::vector<fs::path> roots{"/"};
  if (const char* d = std::getenv("SELQ_TEXTS_DIR")) {
    roots.emplace_back(fs::path(d) / package);
  } else if (const char* home = std::getenv("HOME")) {
    roots.emplace_back(fs::path(home) / ".cache" / "selq" / "texts" / package);
  }
  return roots;
}

std::string find_package_file(const std::string& package, const std::string& path) {
  for (const auto& root : package_roots(package)) {
    std::error_code ec;
    const fs::path f = root / fs::path(path).relative_path();
    if (fs::is_regular_file(f, ec)) return f.string();
  }
  return {};
}

std::string read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw_io("cannot open", {path});
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  const bool failed = n < 0;
  gzclose(f);
  if (failed) throw_bad_input("not a readable gzip file", {path});
  return out;
}

// `text` cut at the last line end at or before `max_bytes` (0: whole).
std::string cut_at_line(std::string text, std::size_t max_bytes) {
  if (max_bytes == 0 || text.size() <= max_bytes) return text;
  const std::size_t nl = text.rfind('\n', max_bytes);
  text.resize(nl == std::string::npos ? max_bytes : nl + 1);
  return text;
}

// Files in a fixed pseudo-random order (XXH3 of the relative path), so that
// the first megabytes sample a whole library rather than its first letters.
std::vector<fs::path> shuffled(std::vector<fs::path> files, const fs::path& base) {
  std::vector<std::pair<std::uint64_t, fs::path>> keyed;
  for (auto& f : files) {
    const std::string rel = fs::relative(f, base).string();
    keyed.emplace_back(XXH3_64bits(rel.data(), rel.size()), std::move(f));
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<fs::path> out;
  for (auto& [h, f] : keyed) out.push_back(std::move(f));
  return out;
}

// Reads files (gzip when `gz`) converted by `convert`, each preceded by a
// blank line, until about `max_bytes`.
std::string read_files(const std::vector<fs::path>& files, std::size_t max_bytes, bool gz,
                       const std::function<std::string(const std::string&)>& convert) {
  std::string out;
  for (const auto& f : files) {
    std::string t = convert(gz ? read_gzip(f.string()) : io::read_file(f.string()));
    if (t.empty()) continue;
    if (!out.empty()) out += "\n";
    out += t;
    if (t.back() != '\n') out += "\n";
    if (max_bytes > 0 && out.size() >= max_bytes) break;
  }
  return cut_at_line(std::move(out), max_bytes);
}

std::string identity(const std::string& s) { return s; }

// The highest-numbered directory `prefix*` under `dir` ("python3.11", "12").
fs::path newest_dir(const fs::path& dir, const std::string& prefix) {
  std::error_code ec;
  fs::path best;
  std::string best_name;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind(prefix, 0) != 0 || n.size() == prefix.size()) continue;
    if (n.find_first_not_of("0123456789.", prefix.size()) != std::string::npos) continue;
    // Compare numerically part by part ("3.11" > "3.9").
    const auto parts = [&](const std::string& s) {
      std::vector<int> v;
      std::istringstream in(s.substr(prefix.size()));
      for (std::string p; std::getline(in, p, '.');) v.push_back(p.empty() ? 0 : std::atoi(p.c_str()));
      return v;
    };
    if (best.empty() || parts(n) > parts(best_name)) {
      best = e.path();
      best_name = n;
    }
  }
  return best;
}

// ---- the sources ----

fs::path python_stdlib_dir() { return newest_dir("/usr/lib", "python3."); }

DefaultText read_python(std::size_t max_bytes) {
  const fs::path dir = python_stdlib_dir();
  if (dir.empty()) throw_bad_input("no Python standard library under /usr/lib/python3.*: apt-get install python3");
  // The library's own code: not its tests, installed packages or the IDE.
  const std::set<std::string> skip{"test", "tests", "idlelib", "lib2to3", "site-packages", "dist-packages",
                                   "__pycache__", "turtledemo"};
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(dir); it != fs::recursive_directory_iterator(); ++it) {
    if (it->is_directory() && skip.contains(it->path().filename().string())) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file() && it->path().extension() == ".py") files.push_back(it->path());
  }
  return {read_files(shuffled(std::move(files), dir), max_bytes, false, identity),
          fmt::format("the Python standard library ({}/**/*.py)", dir.string())};
}

DefaultText read_cpp(std::size_t max_bytes) {
  const fs::path dir = newest_dir("/usr/include/c++", "");
  if (dir.empty() || !fs::is_directory(dir / "bits"))
    throw_bad_input("no libstdc++ headers under /usr/include/c++/*/bits: apt-get install g++");
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir / "bits"))
    if (e.is_regular_file() && (e.path().extension() == ".h" || e.path().extension() == ".tcc")) files.push_back(e.path());
  return {read_files(shuffled(std::move(files), dir), max_bytes, false, identity),
          fmt::format("libstdc++'s headers ({}/bits)", dir.string())};
}

// The pages the manpages packages installed (dpkg's file lists), sections 2-7:
// not the pages of whatever else the machine has.
DefaultText read_manpages(std::size_t max_bytes) {
  std::vector<fs::path> files;
  for (const char* list : {"/var/lib/dpkg/info/manpages.list", "/var/lib/dpkg/info/manpages-dev.list"}) {
    std::ifstream in(list);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("/usr/share/man/man", 0) != 0 || line.size() < 20 || line[18] < '2' || line[18] > '7') continue;
      if (!line.ends_with(".gz")) continue;
      std::error_code ec;
      if (fs::is_regular_file(line, ec) && !fs::is_symlink(line, ec)) files.emplace_back(line);
    }
  }
  if (files.empty())
    throw_bad_input("no Linux man-pages: apt-get install --no-install-recommends manpages manpages-dev");
  const auto page = [](const std::string& roff) { return roff.rfind(".so ", 0) == 0 ? std::string() : roff_to_text(roff); };
  return {read_files(shuffled(std::move(files), "/usr/share/man"), max_bytes, true, page),
          "Linux man-pages, sections 2-7 (the manpages and manpages-dev packages)"};
}

DefaultText read_foldoc(std::size_t max_bytes) {
  const std::string f = find_package_file("dict-foldoc", "/usr/share/dictd/foldoc.dict.dz");
  if (f.empty())
    throw_bad_input("no FOLDOC: scripts/setup.sh test unpacks Debian's dict-foldoc into ~/.cache/selq/texts "
                    "(or apt-get install dict-foldoc)");
  return {cut_at_line(foldoc_to_text(read_gzip(f)), max_bytes), fmt::format("FOLDOC, the Free On-line Dictionary of Computing ({})", f)};
}

DefaultText read_moby_dick(std::size_t max_bytes) {
  const std::string f = find_package_file("r-cran-tokenizers", "/usr/lib/R/site-library/tokenizers/data/Rdata.rdb");
  if (f.empty())
    throw_bad_input("no Moby-Dick: scripts/setup.sh test unpacks Debian's r-cran-tokenizers into ~/.cache/selq/texts "
                    "(or apt-get install r-cran-tokenizers)");
  for (auto& v : io::read_r_character_vectors(f)) {
    std::string all;
    for (const auto& s : v) all += s + "\n";
    if (all.find("Call me Ishmael") != std::string::npos)
      return {cut_at_line(gutenberg_body(all), max_bytes), fmt::format("Herman Melville, Moby-Dick ({})", f)};
  }
  throw_bad_input("the tokenizers package's data holds no Moby-Dick", {f});
}

struct Row {
  TextSourceInfo info;
  std::function<bool()> available;
  std::function<DefaultText(std::size_t)> read;
};

const std::vector<Row>& rows() {
  static const std::vector<Row> table = [] {
    std::vector<Row> t;
    const std::string austen_install = "apt-get install --no-install-recommends r-cran-janeaustenr";
    for (const auto& [slug, title] : austen_novels()) {
      t.push_back({{"austen/" + slug, "prose", fmt::format("Jane Austen, {}", austen_display_title(title)), austen_install},
                   [] { return !find_janeaustenr_database().empty(); },
                   [title](std::size_t max) {
                     DefaultText n = austen_novel(title);
                     n.text = cut_at_line(std::move(n.text), max);
                     return n;
                   }});
    }
    t.push_back({{"melville/moby-dick", "prose", "Herman Melville, Moby-Dick (Project Gutenberg)",
                  "scripts/setup.sh test (Debian's r-cran-tokenizers, unpacked)"},
                 [] { return !find_package_file("r-cran-tokenizers", "/usr/lib/R/site-library/tokenizers/data/Rdata.rdb").empty(); },
                 read_moby_dick});
    t.push_back({{"code/python", "code", "the Python standard library's modules", "apt-get install python3"},
                 [] { return !python_stdlib_dir().empty(); }, read_python});
    t.push_back({{"code/cpp", "code", "libstdc++'s headers (GCC's C++ standard library)", "apt-get install g++"},
                 [] { return !newest_dir("/usr/include/c++", "").empty(); }, read_cpp});
    t.push_back({{"manpages", "technical prose", "Linux man-pages, sections 2-7",
                  "apt-get install --no-install-recommends manpages manpages-dev"},
                 [] { return fs::exists("/var/lib/dpkg/info/manpages.list"); }, read_manpages});
    t.push_back({{"foldoc", "encyclopedia", "FOLDOC, the Free On-line Dictionary of Computing",
                  "scripts/setup.sh test (Debian's dict-foldoc, unpacked)"},
                 [] { return !find_package_file("dict-foldoc", "/usr/share/dictd/foldoc.dict.dz").empty(); },
                 read_foldoc});
    return t;
  }();
  return table;
}

const Row& row(const std::string& name) {
  for (const auto& r : rows())
    if (r.info.name == name) return r;
  std::string known;
  for (const auto& r : rows()) known += (known.empty() ? "" : ", ") + r.info.name;
  throw_bad_input(fmt::format("no text source named '{}' (known: {})", name, known));
}

// roff: the text of a font macro's arguments (".B word", ".BR a b"), quotes removed.
std::string macro_words(const std::string& args) {
  std::string out;
  bool quoted = false;
  for (char c : args) {
    if (c == '"') {
      quoted = !quoted;
      continue;
    }
    out.push_back(c);
  }
  return out;
}

// roff: escapes resolved (\fB, \-, \(em, \[aq], \e, \&, \*(...).
std::string roff_escapes(const std::string& s) {
  static const std::vector<std::pair<std::string, std::string>> glyphs{
      {"em", "\xE2\x80\x94"}, {"en", "\xE2\x80\x93"}, {"aq", "'"},  {"dq", "\""}, {"bu", "\xE2\x80\xA2"},
      {"lq", "\""},           {"rq", "\""},           {"oq", "'"},  {"cq", "'"},  {"ti", "~"},
      {"ha", "^"},            {"rs", "\\"},           {"mu", "x"},  {"co", "(c)"}, {"hy", "-"}};
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out.push_back(s[i]);
      continue;
    }
    const char c = s[++i];
    std::string name;
    if (c == '(' && i + 2 < s.size()) {
      name = s.substr(i + 1, 2);
      i += 2;
    } else if (c == '[') {
      const std::size_t e = s.find(']', i);
      if (e == std::string::npos) break;
      name = s.substr(i + 1, e - i - 1);
      i = e;
    } else if (c == 'f' || c == '*' || c == 'n') {  // font, string, register: \fB \f(CW \f[I] \*(lq
      if (i + 1 < s.size() && s[i + 1] == '(') i += 3;
      else if (i + 1 < s.size() && s[i + 1] == '[') i = std::min(s.size() - 1, s.find(']', i));
      else ++i;
      continue;
    } else {
      switch (c) {
        case '-': out.push_back('-'); break;
        case 'e': case '\\': out.push_back('\\'); break;
        case ' ': case '~': out.push_back(' '); break;
        case '&': case '|': case '^': case ',': case '/': case ')': break;
        case 'c': break;
        case '"': i = s.size(); break;  // a comment to the end of the line
        default: out.push_back(c);
      }
      continue;
    }
    for (const auto& [g, v] : glyphs)
      if (g == name) out += v;
  }
  return out;
}

}  // namespace

std::string roff_to_text(const std::string& roff) {
  std::string out;
  std::istringstream in(roff);
  const auto paragraph = [&out] {
    if (!out.empty() && !out.ends_with("\n\n")) out += out.ends_with("\n") ? "\n" : "\n\n";
  };
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) {
      paragraph();
      continue;
    }
    if (line[0] != '.' && line[0] != '\'') {
      out += roff_escapes(line) + "\n";
      continue;
    }
    const std::size_t sp = line.find_first_of(" \t");
    const std::string req = line.substr(1, sp == std::string::npos ? std::string::npos : sp - 1);
    const std::string args = sp == std::string::npos ? "" : line.substr(line.find_first_not_of(" \t", sp) == std::string::npos ? line.size() : line.find_first_not_of(" \t", sp));
    if (req == "SH" || req == "SS") {
      paragraph();
      out += roff_escapes(macro_words(args)) + "\n";
    } else if (req == "B" || req == "I" || req == "BR" || req == "BI" || req == "IR" || req == "RB" || req == "IB" ||
               req == "RI" || req == "SM" || req == "SB") {
      if (!args.empty()) out += roff_escapes(macro_words(args)) + "\n";
    } else if (req == "PP" || req == "P" || req == "LP" || req == "TP" || req == "IP" || req == "sp") {
      paragraph();
      if (req == "IP" && !args.empty()) out += roff_escapes(macro_words(args.substr(0, args.find(' ')))) + " ";
    }
    // Every other request (comments, .TH, .nf, .RS, .in, ...) carries no text.
  }
  while (out.ends_with("\n\n")) out.pop_back();  // one line end at the end
  return out;
}

std::string foldoc_to_text(const std::string& dict) {
  std::string out, cur;
  const auto flush = [&] {
    std::string p = cur;
    cur.clear();
    // {cross references} keep their words; a leading <domain> tag and a trailing (date) go.
    std::string q;
    for (char c : p)
      if (c != '{' && c != '}') q.push_back(c);
    if (q.rfind('<', 0) == 0) {
      const std::size_t e = q.find('>');
      q = e == std::string::npos ? q : q.substr(q.find_first_not_of(' ', e + 1) == std::string::npos ? q.size() : q.find_first_not_of(' ', e + 1));
    }
    if (q.size() > 13 && q.back() == ')' && q[q.size() - 12] == '(' && q[q.size() - 7] == '-') q.resize(q.size() - 12);
    while (!q.empty() && q.back() == ' ') q.pop_back();
    if (q.size() < 80 || q[0] == '[' || q.find("http") != std::string::npos) return;
    out += q + "\n\n";
  };
  std::istringstream in(dict);
  // The database's own entries ("00-database-*", and the introduction whose headwords
  // are joined by %%%: its licence and how to cite it) are about the file, not entries.
  bool about_the_file = false;
  for (std::string line; std::getline(in, line);) {
    const bool indented = !line.empty() && (line[0] == ' ' || line[0] == '\t');
    const std::size_t b = line.find_first_not_of(" \t");
    if (!indented || b == std::string::npos) {  // a headword or a blank line ends the paragraph
      if (!cur.empty()) about_the_file ? cur.clear() : flush();
      if (!line.empty() && !indented)
        about_the_file = line.rfind("00-database", 0) == 0 || line.find("%%%") != std::string::npos;
      continue;
    }
    if (!cur.empty()) cur.push_back(' ');
    cur += line.substr(b);
  }
  if (!cur.empty() && !about_the_file) flush();
  while (out.ends_with("\n\n")) out.pop_back();  // one line end at the end
  return out;
}

std::string gutenberg_body(const std::string& ebook) {
  std::string t;
  t.reserve(ebook.size());
  for (std::size_t i = 0; i < ebook.size(); ++i)
    if (!(ebook[i] == '\r' && i + 1 < ebook.size() && ebook[i + 1] == '\n')) t.push_back(ebook[i]);
  if (t.rfind("\xEF\xBB\xBF", 0) == 0) t.erase(0, 3);
  const std::size_t start = t.find("*** START OF");
  const std::size_t end = t.find("End of Project Gutenberg");
  if (start == std::string::npos || end == std::string::npos || end < start) return t;
  const std::size_t from = t.find('\n', start);
  return t.substr(from + 1, end - from - 1);
}

const std::vector<TextSourceInfo>& text_sources() {
  static const std::vector<TextSourceInfo> infos = [] {
    std::vector<TextSourceInfo> v;
    for (const auto& r : rows()) v.push_back(r.info);
    return v;
  }();
  return infos;
}

bool text_source_available(const std::string& name) { return row(name).available(); }

DefaultText read_text_source(const std::string& name, std::size_t max_bytes) {
  const Row& r = row(name);
  if (!r.available())
    throw_bad_input(fmt::format("text source '{}' ({}) is not installed: {}", name, r.info.what, r.info.install));
  DefaultText t = r.read(max_bytes);
  t.source = fmt::format("{}: {}", name, t.source);
  return t;
}

}  // namespace selq::runtime
