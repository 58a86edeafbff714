// Shipped recipes by name: every file in recipes/ is listed with a
// description, a bare name resolves to its file, a path stays a path, and an
// unknown name says which names exist.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "recipe/recipe.h"
#include "recipe/shipped.h"

namespace selq::recipe {
namespace {

namespace fs = std::filesystem;

TEST(ShippedRecipes, EveryRecipeFileIsListedWithADescription) {
  std::set<std::string> files;
  for (const auto& e : fs::directory_iterator(fs::path(SELQ_SOURCE_DIR) / "recipes"))
    if (e.path().extension() == ".yaml") files.insert(e.path().stem().string());
  std::set<std::string> listed;
  for (const auto& r : shipped_recipes()) {
    listed.insert(r.name);
    EXPECT_FALSE(r.description.empty()) << r.name;
    EXPECT_TRUE(fs::is_regular_file(r.path)) << r.path;
  }
  EXPECT_EQ(listed, files);
  EXPECT_GE(files.size(), 9u);
}

TEST(ShippedRecipes, BareNameResolvesToTheShippedFile) {
  const std::string p = resolve_recipe_path("llama-fp8");
  EXPECT_EQ(fs::canonical(p), fs::canonical(fs::path(SELQ_SOURCE_DIR) / "recipes" / "llama-fp8.yaml"));
  EXPECT_EQ(fs::canonical(resolve_recipe_path("llama-fp8.yaml")), fs::canonical(p));
  EXPECT_EQ(load_recipe("dspark-oproj-mxfp4").name, "dspark-oproj-mxfp4");
  const std::string path = std::string(SELQ_SOURCE_DIR) + "/recipes/llama-mix.yaml";
  EXPECT_EQ(resolve_recipe_path(path), path);
}

TEST(ShippedRecipes, UnknownNameListsTheShippedOnes) {
  try {
    resolve_recipe_path("llama-fp9");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::BadInput);
    EXPECT_NE(std::string(e.what()).find("llama-fp8"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("selq recipes"), std::string::npos) << e.what();
  }
  EXPECT_THROW(resolve_recipe_path("no/such/recipe.yaml"), Error);
}

TEST(ShippedRecipes, EnvironmentDirectoryComesFirst) {
  const fs::path dir = fs::temp_directory_path() / ("selq-recipes-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  { std::ofstream(dir / "llama-fp8.yaml") << "# mine\nname: mine\nrules: []\ndefault: null\n"; }
  ::setenv("SELQ_RECIPES_DIR", dir.c_str(), 1);
  const std::string p = resolve_recipe_path("llama-fp8");
  auto all = shipped_recipes();
  ::unsetenv("SELQ_RECIPES_DIR");
  fs::remove_all(dir);
  EXPECT_EQ(fs::path(p).parent_path(), fs::weakly_canonical(dir));
  auto it = std::find_if(all.begin(), all.end(), [](const auto& r) { return r.name == "llama-fp8"; });
  ASSERT_NE(it, all.end());
  EXPECT_EQ(it->description, "mine");
}

}  // namespace
}  // namespace selq::recipe
