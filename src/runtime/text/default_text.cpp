#include "runtime/text/default_text.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/r_lazyload.h"
#include "runtime/text/calibration_text.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

struct Novel {
  std::string title;
  std::vector<std::string> lines;
};

// The novels in the database, each titled by its first non-blank line
// ("EMMA", "Persuasion", ...), as the package has them.
std::vector<Novel> read_novels(const std::string& db) {
  std::vector<Novel> novels;
  for (auto& lines : io::read_r_character_vectors(db)) {
    Novel n;
    for (const auto& l : lines)
      if (l.find_first_not_of(" \t") != std::string::npos) {
        n.title = l;
        break;
      }
    n.lines = std::move(lines);
    novels.push_back(std::move(n));
  }
  return novels;
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string display_title(const std::string& lowered) {
  std::string out;
  bool start = true;
  for (char c : lowered) {
    out.push_back(start ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c);
    start = c == ' ';
  }
  // "Sense And Sensibility" -> "Sense and Sensibility"
  for (const char* small : {" And ", " Of "}) {
    std::string s(small), l = lower(s);
    for (std::size_t p; (p = out.find(s)) != std::string::npos;) out.replace(p, s.size(), l);
  }
  return out;
}

Novel novel(const std::string& db, const std::string& title) {
  for (auto& n : read_novels(db))
    if (lower(n.title) == title) return std::move(n);
  throw_bad_input(fmt::format("the Austen database has no novel titled '{}'", display_title(title)), {db});
}

// `hint`: what the caller could give instead (a text, or prompts).
std::string require_database(ErrorHint hint) {
  std::string db = find_janeaustenr_database();
  if (db.empty())
    throw_bad_input(
        "no default English text: install Debian's r-cran-janeaustenr (`apt-get install --no-install-recommends "
        "r-cran-janeaustenr`; scripts/setup.sh does)",
        {}, hint);
  return db;
}

std::string source_of(const std::string& title, const std::string& db) {
  return fmt::format("Jane Austen, {} (r-cran-janeaustenr: {})", display_title(title), db);
}

}  // namespace

std::string find_janeaustenr_database() {
  std::vector<fs::path> dirs;
  if (const char* d = std::getenv("SELQ_JANEAUSTENR_DIR")) {
    dirs.emplace_back(d);
  } else {
    for (const char* lib : {"/usr/lib/R/site-library", "/usr/local/lib/R/site-library", "/usr/lib/R/library"})
      dirs.push_back(fs::path(lib) / "janeaustenr");
  }
  for (const auto& d : dirs) {
    std::error_code ec;
    fs::path f = d / "data" / "Rdata.rdb";
    if (fs::is_regular_file(f, ec)) return f.string();
  }
  return {};
}

std::vector<std::string> paragraphs_of(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  std::string cur;
  for (const auto& l : lines) {
    if (l.find_first_not_of(" \t") == std::string::npos) {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
      continue;
    }
    if (!cur.empty()) cur.push_back(' ');
    cur += l;
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::string austen_display_title(const std::string& title) { return display_title(title); }

const std::vector<std::pair<std::string, std::string>>& austen_novels() {
  static const std::vector<std::pair<std::string, std::string>> v{
      {"sense-and-sensibility", "sense and sensibility"}, {"pride-and-prejudice", "pride and prejudice"},
      {"mansfield-park", "mansfield park"},               {"emma", "emma"},
      {"northanger-abbey", "northanger abbey"},           {"persuasion", "persuasion"}};
  return v;
}

DefaultText default_text(DefaultTextUse use) {
  return use == DefaultTextUse::Evaluation ? austen_novel("emma") : calibration_text({});
}

DefaultText austen_novel(const std::string& title) {
  const std::string db = require_database(ErrorHint::TextFile);
  Novel n = novel(db, title);
  std::string text;
  for (const auto& l : n.lines) {
    text += l;
    text.push_back('\n');
  }
  return {std::move(text), source_of(title, db)};
}

DefaultPrompts default_prompts(std::size_t count, std::size_t words) {
  const std::string db = require_database(ErrorHint::PromptsFile);
  const std::string title = "persuasion";
  DefaultPrompts out;
  for (const auto& p : paragraphs_of(novel(db, title).lines)) {
    if (out.prompts.size() >= count) break;
    std::istringstream in(p);
    std::vector<std::string> w;
    for (std::string t; w.size() < words && in >> t;) w.push_back(std::move(t));
    if (w.size() < words) continue;
    std::string passage = w[0];
    for (std::size_t i = 1; i < w.size(); ++i) passage += " " + w[i];
    out.prompts.push_back("Continue this passage from a novel: " + passage);
  }
  out.source = fmt::format("openings of the first {} paragraphs of {} words or more of {}", out.prompts.size(),
                           words, source_of(title, db));
  return out;
}

DefaultText text_or_default(const std::string& path, DefaultTextUse use) {
  if (path.empty()) return default_text(use);
  return {io::read_file(path), path};
}

DefaultPrompts prompts_or_default(const std::string& path, std::int64_t max_prompts) {
  if (!path.empty()) return {read_prompts_jsonl(path, max_prompts), path};
  if (max_prompts <= 0) return {};
  return default_prompts(static_cast<std::size_t>(max_prompts));
}

DefaultText calibration_tail(const DefaultText& text) {
  const std::string& t = text.text;
  std::size_t from = t.size() - std::min<std::size_t>(t.size() / 2, 16384);
  if (auto nl = t.find('\n', from); nl != std::string::npos) from = nl + 1;
  return {t.substr(from), fmt::format("last {} bytes of {}", t.size() - from, text.source)};
}

std::vector<std::string> read_prompts_jsonl(const std::string& path, std::int64_t max_prompts) {
  std::ifstream in(path);
  if (!in) throw_io(fmt::format("cannot open prompts file {}", path));
  std::vector<std::string> out;
  std::string line;
  std::int64_t lineno = 0;
  while (std::getline(in, line) && (max_prompts <= 0 || static_cast<std::int64_t>(out.size()) < max_prompts)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object())
      throw_bad_input(fmt::format("{}:{}: not a JSON object", path, lineno));
    for (const char* key : {"question", "prompt", "text"})
      if (j.contains(key) && j[key].is_string()) {
        out.push_back(j[key].get<std::string>());
        break;
      }
  }
  return out;
}

}  // namespace selq::runtime
