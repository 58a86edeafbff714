// Recipes, plans, quantize, verify, inspect, eval and sensitivity: the same
// library calls the CLI (src/cli) makes, with Python values in and JSON text
// out (parsed in python/selq).
#include <memory>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "calibration/calibrate.h"
#include "calibration/gptq_pass.h"
#include "core/error.h"
#include "interruptible.h"
#include "io/checkpoint.h"
#include "pipeline/calibration.h"
#include "pipeline/inspect.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "pipeline/verify.h"
#include "planner/candidates.h"
#include "planner/runtime_tiers.h"
#include "planner/sensitivity.h"
#include "planner/target.h"
#include "quant/rounding_traits.h"
#include "recipe/recipe.h"
#include "recipe/shipped.h"
#include "report/html_report.h"
#include "rotation/rotate_checkpoint.h"
#include "runtime/eval/base_logprobs.h"
#include "runtime/eval/eval.h"
#include "runtime/text/default_text.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace selq::python {
namespace {

using ProgressFn = std::function<void(std::uint64_t, std::uint64_t, std::size_t, std::size_t)>;
using StageFn = std::function<void(std::string, std::uint64_t, std::uint64_t)>;

// A plan with what executing it needs: the opened source and the recipe.
struct PlanHandle {
  std::shared_ptr<io::Checkpoint> checkpoint;
  recipe::Recipe recipe;
  pipeline::PlanOptions options;
  pipeline::Plan plan;
};

pipeline::PlanOptions plan_options(const std::optional<std::string>& dialect, std::uint64_t max_shard_bytes,
                                   const std::optional<std::string>& calibration) {
  pipeline::PlanOptions o;
  if (dialect) o.dialect = exporter::parse_dialect(*dialect);
  o.max_shard_bytes = max_shard_bytes;
  if (calibration) {
    o.activation_amax = pipeline::load_activation_amax(*calibration);
    o.calibration_path = *calibration;
    o.calibration = pipeline::load_calibration_provenance(*calibration);
  }
  return o;
}

std::shared_ptr<PlanHandle> make_plan(const std::string& source, const recipe::Recipe& r,
                                      const std::optional<std::string>& dialect, std::uint64_t max_shard_bytes,
                                      const std::optional<std::string>& calibration) {
  auto h = std::make_shared<PlanHandle>();
  h->recipe = r;
  h->options = plan_options(dialect, max_shard_bytes, calibration);
  nb::gil_scoped_release nogil;
  h->checkpoint = io::Checkpoint::open(source);
  h->plan = pipeline::make_plan(*h->checkpoint, h->recipe, h->options);
  return h;
}

pipeline::QuantizeOptions quantize_options(bool overwrite, int threads, bool allow_non_finite,
                                           std::uint64_t memory_budget) {
  pipeline::QuantizeOptions qo;
  qo.overwrite = overwrite;
  qo.threads = threads;
  qo.allow_non_finite = allow_non_finite;
  qo.memory_budget = memory_budget;
  return qo;
}

// Progress reports go to `progress` (may be empty) on the Python thread. The
// callbacks are captured by reference: copying one (a Python object) off the
// Python thread would take the GIL.
void set_progress(pipeline::QuantizeOptions& qo, Session& s, const ProgressFn& progress) {
  qo.on_progress = [&s, &progress](const pipeline::Progress& p) {
    if (progress)
      s.report([&progress, p] { progress(p.bytes_done, p.bytes_total, p.tensors_done, p.tensors_total); });
    else
      s.check();
  };
}

// The HTML report written into the checkpoint before the run commits, as the
// CLI's quantize does; a failure becomes a warning of the result.
void write_report(pipeline::QuantizeOptions& qo, std::vector<std::string>& warnings) {
  qo.before_commit = [&warnings](const std::string& staged) {
    std::string why;
    if (!report::try_write_checkpoint_report(staged, why)) warnings.push_back("no HTML report: " + why);
  };
}

nb::tuple result_tuple(const pipeline::QuantizeResult& r, const std::vector<std::string>& warnings) {
  return nb::make_tuple(r.manifest, r.seconds, r.bytes_read, r.bytes_written, r.already_done, warnings);
}

nb::tuple quantize(const PlanHandle& h, const std::string& dst, bool force, int threads, bool allow_non_finite,
                   std::uint64_t memory_budget, const ProgressFn& progress,
                   const std::optional<std::string>& calibration_text, std::int64_t calibration_tokens,
                   std::int64_t calibration_context, std::uint64_t hessian_budget, bool gptq_gate,
                   double gptq_expert_prior) {
  auto qo = quantize_options(force, threads, allow_non_finite, memory_budget);
  std::vector<std::string> warnings;
  auto r = Session::run<pipeline::QuantizeResult>([&](Session& s) {
    auto o = qo;
    set_progress(o, s, progress);
    write_report(o, warnings);
    // Rounding gptq's pass where the plan has it, as `selq quantize` runs it.
    calibration::GptqPassOptions pass;
    if (calibration_text) pass.texts = {*calibration_text};
    pass.max_tokens = calibration_tokens;
    pass.context = calibration_context;
    pass.hessian_budget = hessian_budget;  // 0: half of RAM
    pass.gate = gptq_gate;
    pass.expert_prior = gptq_expert_prior;
    pass.threads = threads;
    calibration::use_gptq_pass(o, pass, dst);
    pipeline::Plan plan = h.plan;
    auto res = pipeline::quantize_planned(*h.checkpoint, plan, h.recipe, dst, o);
    if (plan.needs_model_pass()) calibration::remove_gptq_work_dir(dst);
    return res;
  });
  return result_tuple(r, warnings);
}

nb::tuple quantize_in_place(const std::string& dir, const recipe::Recipe& r, const std::optional<std::string>& dialect,
                            const std::optional<std::string>& calibration, int threads, bool allow_non_finite,
                            std::uint64_t memory_budget, const ProgressFn& progress) {
  auto qo = quantize_options(false, threads, allow_non_finite, memory_budget);
  const auto po = plan_options(dialect, 0, calibration);
  auto plan = std::make_shared<pipeline::Plan>();
  std::vector<std::string> warnings;
  auto res = Session::run<pipeline::QuantizeResult>([&](Session& s) {
    auto o = qo;
    set_progress(o, s, progress);
    write_report(o, warnings);
    return pipeline::quantize({dir, "", true, r, po}, o, plan.get());
  });
  return nb::make_tuple(result_tuple(res, warnings), plan->json_text(-1), plan->bits_per_weight());
}

std::string sensitivity(const std::string& source, const std::vector<std::string>& candidates,
                        const std::string& dialect, const std::string& hardware, const std::string& tier,
                        const std::optional<std::string>& text, const std::string& text_source,
                        std::int64_t tokens, std::int64_t context, std::int64_t rows,
                        const std::vector<std::string>& probes, int probe_every, const StageFn& progress) {
  const auto d = exporter::parse_dialect(dialect);
  const auto t = planner::parse_tier(tier);
  const auto hw = planner::parse_hardware(hardware);
  if (probe_every < 1) throw_bad_input("probe_every must be at least 1");
  return Session::run<std::string>([&](Session& s) {
    auto ckpt = io::Checkpoint::open(source);
    auto layout = planner::decision_units(*ckpt, d);
    auto cands = planner::select_candidates(candidates, hw, d);
    planner::check_tier_scores(cands, t);
    planner::SensitivityOptions opt;
    opt.on_progress = [&](std::uint64_t done, std::uint64_t total) {
      if (progress) s.report([&progress, done, total] { progress("data-free", done, total); });
      else s.check();
    };
    auto table = planner::data_free_sensitivity(*ckpt, layout, cands, opt);
    if (t != planner::Tier::DataFree) {
      planner::CalibrationText ct;
      if (text) {
        ct.text = *text;
        ct.source = text_source;
      } else {
        auto def = runtime::default_text(runtime::DefaultTextUse::Calibration);
        ct.text = def.text;
        ct.source = def.source;
      }
      ct.tokens = tokens;
      planner::RuntimeTierOptions ropt;
      ropt.context = context;
      ropt.rows = rows;
      ropt.probe_every = probe_every;
      ropt.probes = probes;
      ropt.on_progress = [&](const std::string& stage, std::uint64_t done, std::uint64_t total) {
        if (progress) s.report([&progress, stage, done, total] { progress(stage, done, total); });
        else s.check();
      };
      planner::add_runtime_tiers(table, layout, cands, source, ct, t, ropt);
    }
    return table.to_json().dump(1) + "\n";  // as `selq sensitivity -o` writes it
  });
}

// (TargetResult JSON, the mix's recipe YAML) for `plan --sensitivity --target-bpw`.
std::tuple<std::string, std::string, std::string> plan_target(
    const std::string& source, const std::string& sensitivity_path, std::optional<double> target_bpw,
    int pareto_points, const std::optional<std::string>& tier, bool acceptance, const std::string& hardware,
    const std::vector<std::string>& candidates, const std::string& dialect, const std::string& recipe_name,
    const std::string& arch, bool fp8_kv_cache, bool prefill_query_quant, int refine,
    const std::optional<std::string>& refine_text, const std::string& refine_text_source, std::int64_t refine_tokens) {
  planner::TargetRequest req;
  req.sensitivity_path = sensitivity_path;
  req.target_bpw = target_bpw;
  req.pareto_points = pareto_points;
  if (tier) req.tier = planner::parse_tier(*tier);
  req.acceptance = acceptance;
  req.hardware = planner::parse_hardware(hardware);
  req.candidates = candidates;
  req.dialect = exporter::parse_dialect(dialect);
  req.recipe_name = recipe_name;
  req.serving = {arch, fp8_kv_cache, prefill_query_quant};
  req.refine = refine;
  if (refine > 0) {
    const auto text = refine_text ? runtime::DefaultText{*refine_text, refine_text_source}
                                  : runtime::default_text(runtime::DefaultTextUse::Calibration);
    req.refine_text = {text.text, text.source, refine_tokens};
  }
  nb::gil_scoped_release nogil;
  auto ckpt = io::Checkpoint::open(source);
  auto r = planner::plan_target(*ckpt, req);
  return {r.to_json().dump(), r.recipe_yaml, r.format()};
}

// `selq calibrate`: the calibration JSON (and, with `out`, the JSON and its
// moments file written there).
std::string calibrate(const std::string& source, const std::optional<std::string>& text,
                      const std::string& text_source, std::int64_t max_tokens, std::int64_t context,
                      const std::optional<std::string>& out, const StageFn& progress) {
  return Session::run<std::string>([&](Session& s) {
    const auto t = text ? runtime::DefaultText{*text, text_source}
                        : runtime::default_text(runtime::DefaultTextUse::Calibration);
    auto r = calibration::calibrate(source, t.text, t.source, max_tokens, context,
                                [&](std::uint64_t done, std::uint64_t total) {
                                  if (progress) s.report([&progress, done, total] { progress("calibrate", done, total); });
                                  else s.check();
                                });
    if (out) r.save(*out);
    return r.to_json().dump();
  });
}

// `selq rotate`: the rotation record (selq-rotation.json) of the checkpoint written to `dst`.
std::string rotate(const std::string& source, const std::string& dst, const std::string& kind, std::uint64_t seed,
                   bool f32_linears, bool force, const StageFn& progress) {
  return Session::run<std::string>([&](Session& s) {
    rotation::RotateOptions o;
    o.kind = rotation::parse_rotation_kind(kind, "rotation");
    o.seed = seed;
    o.overwrite = force;
    o.f32_linears = f32_linears;
    o.on_progress = [&](std::size_t done, std::size_t total) {
      if (progress) s.report([&progress, done, total] { progress("rotate", done, total); });
      else s.check();
    };
    return rotation::rotate_checkpoint(source, dst, o).record.dump();
  });
}

// What a quantization with a rotation reads (rotation::rotated_source): the
// source when it carries the rotation, else its rotation made in work_dir.
std::string rotated_source(const std::string& source, const std::string& work_dir, const std::string& kind,
                           std::uint64_t seed, std::int64_t block, const StageFn& progress) {
  return Session::run<std::string>([&](Session& s) {
    rotation::RotateOptions o;
    o.kind = rotation::parse_rotation_kind(kind, "rotation");
    o.seed = seed;
    o.block = block;
    o.on_progress = [&](std::size_t done, std::size_t total) {
      if (progress) s.report([&progress, done, total] { progress("rotate", done, total); });
      else s.check();
    };
    return rotation::rotated_source(source, work_dir, o);
  });
}

std::tuple<std::string, std::string> evaluate(const std::string& base, const std::vector<std::string>& quantized,
                     const std::optional<std::string>& text, const std::string& text_source,
                     const std::optional<std::vector<std::string>>& prompts, const std::string& prompts_source,
                     std::int64_t context, std::int64_t max_tokens, int draft_k, std::int64_t max_prompts,
                     std::int64_t gen_tokens, bool chat_template, const std::optional<std::string>& base_cache,
                     const StageFn& progress) {
  runtime::EvalOptions o;
  o.base_cache_dir = base_cache ? *base_cache : runtime::default_base_logprobs_dir();
  o.context = context;
  o.max_tokens = max_tokens;
  o.draft_k = draft_k;
  o.max_prompts = max_prompts;
  o.gen_tokens = gen_tokens;
  o.chat_template = chat_template;
  return Session::run<std::tuple<std::string, std::string>>([&](Session& s) {
    runtime::DefaultText t;
    if (text) t = {*text, text_source};
    else t = runtime::default_text(runtime::DefaultTextUse::Evaluation);
    runtime::DefaultPrompts p;
    if (prompts) p = {*prompts, prompts_source};
    else p = runtime::prompts_or_default("", max_prompts);
    auto opts = o;
    opts.on_progress = [&](const std::string& stage, std::uint64_t done, std::uint64_t total) {
      if (progress) s.report([&progress, stage, done, total] { progress(stage, done, total); });
      else s.check();
    };
    auto rep = runtime::evaluate(base, quantized, t.text, t.source, p.prompts, p.source, opts);
    return std::make_tuple(rep.to_json().dump(), rep.table());
  });
}


// Recipes: loaded, parsed, listed, given a rounding.
void bind_recipes(nb::module_& m) {
  nb::class_<recipe::Recipe>(m, "Recipe")
      .def_ro("name", &recipe::Recipe::name)
      .def_ro("path", &recipe::Recipe::path)
      .def_ro("dialect", &recipe::Recipe::dialect)
      .def_ro("arch", &recipe::Recipe::arch)
      .def_ro("rotation", &recipe::Recipe::rotation)
      .def_ro("rotation_block", &recipe::Recipe::rotation_block)
      .def_ro("text", &recipe::Recipe::text);
  m.def("load_recipe", &recipe::load_recipe, "name_or_path"_a, "A recipe file, or a shipped recipe by name.");
  m.def("parse_recipe", &recipe::parse_recipe, "yaml_text"_a, "path_for_errors"_a, "A recipe from YAML text.");
  m.def(
      "with_rounding",
      [](const recipe::Recipe& r, const std::string& rounding) {
        return recipe::with_rounding(r, quant::parse_rounding(rounding, "rounding"));
      },
      "recipe"_a, "rounding"_a, "The recipe with this rounding for every rule naming none (--rounding).");
  m.def("with_rotation", &recipe::with_rotation, "recipe"_a, "rotation"_a, "The recipe with `rotation:` (--rotation).");
  m.def("with_rotation_block", &recipe::with_rotation_block, "recipe"_a, "block"_a,
        "The recipe with `rotation_block:` (--rotation-block).");
  m.def(
      "shipped_recipes",
      [] {
        std::vector<std::tuple<std::string, std::string, std::string>> out;
        for (const auto& r : recipe::shipped_recipes()) out.emplace_back(r.name, r.path, r.description);
        return out;
      },
      "(name, path, description) of every shipped recipe.");
}

// The commands: inspect, plan, quantize, verify, sensitivity, calibrate, eval.
void bind_commands(nb::module_& m) {
  m.def(
      "inspect",
      [](const std::string& path, bool tensors) {
        nb::gil_scoped_release nogil;
        auto ckpt = io::Checkpoint::open(path);
        auto j = pipeline::inspect_checkpoint(*ckpt, tensors);
        return std::make_tuple(j.dump(), pipeline::format_inspection(j, tensors));
      },
      "path"_a, "tensors"_a);

  nb::class_<PlanHandle>(m, "PlanHandle")
      .def("to_json", [](const PlanHandle& h) { return h.plan.json_text(-1); })
      .def("format", [](const PlanHandle& h) { return pipeline::format_plan(h.plan); })
      .def_prop_ro("warnings", [](const PlanHandle& h) { return h.plan.warnings; })
      .def_prop_ro("bits_per_weight", [](const PlanHandle& h) { return h.plan.bits_per_weight(); })
      .def_prop_ro("source_bytes", [](const PlanHandle& h) { return h.plan.source_bytes(); })
      .def_prop_ro("output_bytes", [](const PlanHandle& h) { return h.plan.output_bytes(); })
      .def_prop_ro("dialect", [](const PlanHandle& h) { return exporter::dialect_name(h.plan.dialect); })
      .def_prop_ro("recipe", [](const PlanHandle& h) { return h.recipe; });
  m.def("make_plan", &make_plan, "source"_a, "recipe"_a, "dialect"_a, "max_shard_bytes"_a, "calibration"_a);
  m.def("quantize", &quantize, "plan"_a, "dst"_a, "force"_a, "threads"_a, "allow_non_finite"_a,
        "memory_budget"_a, "progress"_a.none(), "calibration_text"_a.none(), "calibration_tokens"_a,
        "calibration_context"_a, "hessian_budget"_a, "gptq_gate"_a, "gptq_expert_prior"_a);
  m.def("quantize_in_place", &quantize_in_place, "dir"_a, "recipe"_a, "dialect"_a.none(), "calibration"_a.none(),
        "threads"_a, "allow_non_finite"_a, "memory_budget"_a, "progress"_a.none());

  m.def(
      "verify",
      [](const std::string& path, const std::optional<std::string>& against) {
        nb::gil_scoped_release nogil;
        auto ckpt = io::Checkpoint::open(path);
        std::unique_ptr<io::Checkpoint> src;
        pipeline::VerifyOptions opts;
        if (against) {
          src = io::Checkpoint::open(*against);
          opts.against = src.get();
        }
        auto r = pipeline::verify_checkpoint(*ckpt, opts);
        std::vector<std::string> lines;
        for (const auto& f : r.findings) lines.push_back(pipeline::format_finding(f));
        return std::make_tuple(r.report.dump(), lines);
      },
      "path"_a, "against"_a.none());

  m.def("sensitivity", &sensitivity, "source"_a, "candidates"_a, "dialect"_a, "hardware"_a, "tier"_a,
        "text"_a.none(), "text_source"_a, "tokens"_a, "context"_a, "rows"_a, "probes"_a, "probe_every"_a,
        "progress"_a.none());
  m.def("plan_target", &plan_target, "source"_a, "sensitivity_path"_a, "target_bpw"_a.none(), "pareto_points"_a,
        "tier"_a.none(), "acceptance"_a, "hardware"_a, "candidates"_a, "dialect"_a, "recipe_name"_a, "arch"_a,
        "fp8_kv_cache"_a, "prefill_query_quant"_a, "refine"_a, "refine_text"_a.none(), "refine_text_source"_a,
        "refine_tokens"_a);
  m.def("calibrate", &calibrate, "source"_a, "text"_a.none(), "text_source"_a, "max_tokens"_a, "context"_a,
        "out"_a.none(), "progress"_a.none());
  m.def("rotated_source", &rotated_source, "source"_a, "work_dir"_a, "kind"_a, "seed"_a, "block"_a,
        "progress"_a.none());
  m.def("rotate", &rotate, "source"_a, "dst"_a, "kind"_a, "seed"_a, "f32_linears"_a, "force"_a, "progress"_a.none());
  m.def("evaluate", &evaluate, "base"_a, "quantized"_a, "text"_a.none(), "text_source"_a, "prompts"_a.none(),
        "prompts_source"_a, "context"_a, "max_tokens"_a, "draft_k"_a, "max_prompts"_a, "gen_tokens"_a,
        "chat_template"_a, "base_cache"_a.none(), "progress"_a.none());
}

}  // namespace

void bind_pipeline(nb::module_& m) {
  bind_recipes(m);
  bind_commands(m);
}

}  // namespace selq::python
