// `selq recipes`: the shipped recipes, by name, with what each does.
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "recipe/shipped.h"

namespace selq::cli {
namespace {

const CommandRegistration kRecipes(25, [](CLI::App& root, int& status) {
  auto json = std::make_shared<bool>(false);
  auto* cmd = root.add_subcommand("recipes",
                                  "List the shipped recipes: each can be passed by name as --recipe NAME.");
  cmd->footer(
      "Examples:\n"
      "  selq recipes\n"
      "  selq plan CKPT --recipe llama-fp8          # a shipped recipe by name\n"
      "  selq plan CKPT --recipe ./my-recipe.yaml   # or any recipe file");
  cmd->add_flag("--json", *json, "Print JSON on stdout");
  cmd->callback([json, &status] {
    const auto recipes = recipe::shipped_recipes();
    if (*json) {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& r : recipes) j.push_back({{"name", r.name}, {"path", r.path}, {"description", r.description}});
      fmt::print("{}\n", j.dump(2));
    } else {
      std::size_t w = 4;
      for (const auto& r : recipes) w = std::max(w, r.name.size());
      for (const auto& r : recipes) fmt::print("{:<{}}  {}\n", r.name, w, r.description);
      std::fflush(stdout);
      if (recipes.empty()) fmt::print(stderr, "no shipped recipes found (set SELQ_RECIPES_DIR)\n");
      else fmt::print(stderr, "from {}\n", fmt::join(recipe::shipped_recipe_dirs(), ", "));
    }
    status = 0;
  });
});

}  // namespace
}  // namespace selq::cli
