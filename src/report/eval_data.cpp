#include "report/eval_data.h"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "report/manifest_data.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace selq::report {

std::string recipe_kind_name(RecipeKind k) {
  switch (k) {
    case RecipeKind::Uniform: return "uniform scheme";
    case RecipeKind::Hand: return "hand recipe";
    case RecipeKind::Planned: return "planned mix";
    case RecipeKind::Unknown: break;
  }
  return "evaluated";
}

namespace {

runtime::Interval interval(const json& j) {
  // Intervals with too few windows are written as null bounds (NaN).
  auto num = [](const json& v) { return v.is_number() ? v.get<double>() : std::nan(""); };
  return {num(j.at("value")), num(j.at("lo")), num(j.at("hi"))};
}

std::string canonical(const std::string& p) {
  std::error_code ec;
  auto c = fs::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

EvalRow row_of(const json& m, bool base) {
  EvalRow r;
  r.path = m.at("path").get<std::string>();
  r.name = fs::path(r.path).filename().string();
  if (r.name.empty()) r.name = r.path;
  r.base = base;
  r.stored_bytes = m.at("stored_bytes").get<std::uint64_t>();
  r.bits_per_weight = m.at("linear_bits_per_weight").get<double>();
  r.perplexity = m.at("perplexity").get<double>();
  if (base) return r;
  r.kl_p99 = m.at("kl_p99").get<double>();
  const auto& text = m.at("intervals").at("text");
  r.ppl_ratio = interval(text.at("ppl_ratio"));
  r.kl_mean = interval(text.at("kl_mean"));
  r.top1 = interval(text.at("same_top_p"));
  r.has_acceptance = m.value("spec_steps", 0) > 0;
  if (r.has_acceptance) {
    const auto& acc = m.at("intervals").at("acceptance");
    r.accepted_greedy = interval(acc.at("accepted_greedy"));
    r.accepted_expected = interval(acc.at("accepted_expected_t1"));
  }
  if (m.contains("kl_histogram")) {
    r.kl_edges = m["kl_histogram"].at("edges").get<std::vector<double>>();
    r.kl_counts = m["kl_histogram"].at("counts").get<std::vector<std::int64_t>>();
  }
  // What made it: the model's manifest, when the checkpoint is still there.
  try {
    const ManifestData md = load_manifest(r.path);
    r.recipe = md.recipe_name;
    r.kind = md.planned() ? RecipeKind::Planned
             : md.quantized_formats().size() == 1 ? RecipeKind::Uniform
                                                  : RecipeKind::Hand;
  } catch (const Error&) {
    r.kind = RecipeKind::Unknown;
  }
  return r;
}

}  // namespace

EvalData load_eval(const std::string& path, const std::string& checkpoint_dir) {
  const auto j = json::parse(io::read_file(path), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_bad_input(fmt::format("{}: not valid JSON", path));
  EvalData d;
  d.path = path;
  const std::string self = canonical(checkpoint_dir);
  std::vector<std::string> names;
  bool found = false;
  try {
    d.text_source = j.value("text_source", "");
    d.text_tokens = j.value("text_tokens", std::int64_t{0});
    d.context = j.value("context", std::int64_t{0});
    d.rows.push_back(row_of(j.at("base"), true));
    for (const auto& m : j.at("quantized")) {
      d.rows.push_back(row_of(m, false));
      names.push_back(d.rows.back().path);
      if (!found && canonical(d.rows.back().path) == self) {
        d.self = d.rows.size() - 1;
        found = true;
      }
    }
  } catch (const json::exception& e) {
    throw_bad_input(fmt::format("{}: not the JSON of selq eval: {}", path, e.what()));
  }
  if (!found)
    throw_bad_input(fmt::format("{}: evaluates {} against {}, not {} (an eval of another model?)", path,
                                names.empty() ? std::string("no quantized model") : fmt::format("{}", fmt::join(names, ", ")),
                                d.rows.front().path, checkpoint_dir));
  return d;
}

}  // namespace selq::report
