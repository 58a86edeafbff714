#pragma once
// The recipes that ship with selq (recipes/*.yaml in the source tree,
// share/selq/recipes in an install), found by name: `--recipe llama-fp8`.
#include <string>
#include <vector>

namespace selq::recipe {

struct ShippedRecipe {
  std::string name;         // file name without .yaml
  std::string path;
  std::string description;  // the recipe's `description`, else its first comment line
};

// Directories searched, in order: $SELQ_RECIPES_DIR, <exe>/../share/selq/recipes,
// the source tree's recipes/ (for a build tree). Only those that exist.
std::vector<std::string> shipped_recipe_dirs();
// Every shipped recipe, by name (the first directory wins for a name in two).
std::vector<ShippedRecipe> shipped_recipes();

// `name_or_path` as given when it is a file; else, when it is a bare name
// (no '/'; ".yaml" optional), the shipped recipe of that name. Throws
// BadInput listing the shipped names when neither exists.
std::string resolve_recipe_path(const std::string& name_or_path);

}  // namespace selq::recipe
