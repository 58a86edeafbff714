#include "pipeline/module_names.h"

#include <regex>

namespace selq::pipeline {

std::optional<int> layer_index_of(const std::string& name) {
  static const std::regex re(R"((^|\.)layers\.(\d+)\.)");
  std::smatch m;
  if (std::regex_search(name, m, re)) return std::stoi(m[2].str());
  return std::nullopt;
}

std::string layer_relative_kind(const std::string& module) {
  static const std::regex layer_re(R"(^.*?layers\.\d+\.)");
  static const std::regex expert_re(R"(\.experts\.\d+\.)");
  std::string rel = std::regex_replace(module, layer_re, "", std::regex_constants::format_first_only);
  rel = std::regex_replace(rel, expert_re, ".experts.*.");
  return rel;
}

}  // namespace selq::pipeline
