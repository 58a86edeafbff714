#include "cli/plan_args.h"

#include <cctype>

#include <fmt/format.h>

#include "core/error.h"
#include "export/dialect.h"
#include "pipeline/calibration.h"
#include "quant/rounding_traits.h"

namespace selq::cli {

void add_plan_args(CLI::App& cmd, PlanArgs& args, bool recipe_required) {
  cmd.add_option("source", args.source, "Source checkpoint: a .safetensors file, a directory, or an index.json")
      ->required();
  auto* recipe = cmd.add_option("--recipe,-r", args.recipe,
                                "Recipe YAML (see docs/RECIPES.md; shipped ones are in recipes/)");
  if (recipe_required) recipe->required();
  cmd.add_option("--dialect", args.dialect,
                 "Config dialect, overriding the recipe's: " + exporter::dialect_names_text());
  cmd.add_option("--max-shard-size", args.max_shard_size,
                 "Re-shard the output with this cap (e.g. 5GB); default keeps the source's shard layout");
  cmd.add_option("--calibration", args.calibration,
                 "Activation amax per module from `selq calibrate` (JSON); needed by schemes with static "
                 "activation scales (fp8-static, nvfp4 activations) and by --rounding weighted (the input "
                 "second moments written beside it)");
  cmd.add_option("--rounding", args.rounding,
                 "How scales are chosen, for every rule whose options name no rounding (docs/RECIPES.md\n"
                 "\"Rounding\"; weighted needs --calibration, gptq --calibration-text):\n" +
                     quant::rounding_help_text());
  cmd.add_flag("--strict", args.strict,
               "Refuse a plan with warnings (e.g. a rule asking for a format that already-quantized modules of "
               "the source are not in, without `requantize: true`), before anything is written");
}

std::uint64_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  double v = 0;
  try {
    v = std::stod(text, &pos);
  } catch (...) {
    throw_bad_input(fmt::format("bad size '{}' (expected e.g. 5GB, 500MB, 2GiB)", text));
  }
  std::string unit = text.substr(pos);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  double mult = 1;
  if (unit == "" || unit == "B") mult = 1;
  else if (unit == "KB") mult = 1e3;
  else if (unit == "MB") mult = 1e6;
  else if (unit == "GB") mult = 1e9;
  else if (unit == "TB") mult = 1e12;
  else if (unit == "KIB") mult = 1024.0;
  else if (unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else throw_bad_input(fmt::format("bad size unit in '{}' (B, KB, MB, GB, TB, KiB, MiB, GiB)", text));
  if (v <= 0) throw_bad_input(fmt::format("size must be positive: '{}'", text));
  return static_cast<std::uint64_t>(v * mult);
}

recipe::Recipe load_plan_recipe(const PlanArgs& args) {
  recipe::Recipe r = recipe::load_recipe(args.recipe);
  if (args.rounding.empty()) return r;
  return recipe::with_rounding(r, quant::parse_rounding(args.rounding, "--rounding"));
}

pipeline::PlanOptions plan_options(const PlanArgs& args) {
  pipeline::PlanOptions o;
  if (!args.dialect.empty()) {
    o.dialect = exporter::parse_dialect(args.dialect);
  }
  if (!args.max_shard_size.empty()) o.max_shard_bytes = parse_size(args.max_shard_size);
  o.strict = args.strict;
  if (!args.calibration.empty()) {
    o.activation_amax = pipeline::load_activation_amax(args.calibration);
    o.calibration_path = args.calibration;
    o.calibration = pipeline::load_calibration_provenance(args.calibration);
  }
  return o;
}

}  // namespace selq::cli
