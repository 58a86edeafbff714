#include "recipe/shipped.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/error.h"

namespace selq::recipe {
namespace {

namespace fs = std::filesystem;

fs::path executable_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

// The `description` field, else the first comment line, of a recipe file.
std::string description_of(const fs::path& file) {
  try {
    YAML::Node n = YAML::LoadFile(file.string());
    if (n.IsMap() && n["description"] && n["description"].IsScalar()) {
      std::string d = n["description"].as<std::string>();
      std::replace(d.begin(), d.end(), '\n', ' ');
      while (!d.empty() && d.back() == ' ') d.pop_back();
      return d;
    }
  } catch (const YAML::Exception&) {
    return "(not valid YAML)";
  }
  // The leading comment block's first sentence.
  std::ifstream in(file);
  std::string text;
  for (std::string line; std::getline(in, line) && line.starts_with("#");) {
    auto start = line.find_first_not_of("# ");
    if (start == std::string::npos) break;
    if (!text.empty()) text.push_back(' ');
    text.append(line, start, std::string::npos);
    if (auto end = text.find(". "); end != std::string::npos) return text.substr(0, end + 1);
    if (text.back() == '.') return text;
  }
  if (!text.empty()) return text;
  return {};
}

}  // namespace

std::vector<std::string> shipped_recipe_dirs() {
  std::vector<fs::path> candidates;
  if (const char* d = std::getenv("SELQ_RECIPES_DIR")) candidates.emplace_back(d);
  if (fs::path exe = executable_dir(); !exe.empty()) candidates.push_back(exe / ".." / "share" / "selq" / "recipes");
#ifdef SELQ_SOURCE_RECIPES_DIR
  candidates.emplace_back(SELQ_SOURCE_RECIPES_DIR);
#endif
  std::vector<std::string> out;
  for (const auto& c : candidates) {
    std::error_code ec;
    if (fs::is_directory(c, ec)) out.push_back(fs::weakly_canonical(c, ec).string());
  }
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<ShippedRecipe> shipped_recipes() {
  std::vector<ShippedRecipe> out;
  std::set<std::string> seen;
  for (const auto& dir : shipped_recipe_dirs()) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".yaml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string name = f.stem().string();
      if (!seen.insert(name).second) continue;
      out.push_back({name, f.string(), description_of(f)});
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

std::string resolve_recipe_path(const std::string& name_or_path) {
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  const bool bare = name_or_path.find('/') == std::string::npos;
  if (bare && !name_or_path.empty()) {
    std::string name = name_or_path;
    if (name.ends_with(".yaml")) name.resize(name.size() - 5);
    std::vector<std::string> names;
    for (auto& r : shipped_recipes()) {
      if (r.name == name) return r.path;
      names.push_back(r.name);
    }
    throw_bad_input(fmt::format("no recipe file '{}' and no shipped recipe of that name (shipped: {}; "
                                "`selq recipes` lists them)",
                                name_or_path, names.empty() ? "none found" : fmt::format("{}", fmt::join(names, ", "))),
                    {name_or_path});
  }
  throw_io("cannot open recipe", {name_or_path});
}

}  // namespace selq::recipe
