#include "demo/demo.h"

#include <filesystem>
#include <fstream>
#include <utility>

#include <fmt/format.h>

#include "calibration/calibrate.h"
#include "calibration/gptq_pass.h"
#include "core/error.h"
#include "export/dialect.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "pipeline/plan.h"
#include "pipeline/quantize.h"
#include "planner/candidates.h"
#include "planner/sensitivity.h"
#include "planner/target.h"
#include "planner/units.h"
#include "quant/rounding_traits.h"
#include "quant/scheme.h"
#include "recipe/recipe.h"
#include "recipe/shipped.h"
#include "report/html_report.h"
#include "runtime/eval/base_logprobs.h"
#include "runtime/gguf/demo_models.h"
#include "runtime/gguf/import_gguf.h"
#include "runtime/text/default_text.h"

namespace selq::demo {
namespace {

namespace fs = std::filesystem;

// "llama-nvfp4+gptq" -> the recipe and its rounding. `weighted` needs the
// calibration's input moments, which the demo does not gather: it is refused.
std::pair<std::string, quant::Rounding> recipe_and_rounding(const std::string& entry) {
  const auto plus = entry.rfind('+');
  if (plus == std::string::npos) return {entry, quant::Rounding::Nearest};
  const auto rounding = quant::parse_rounding(std::string_view(entry).substr(plus + 1), "recipe NAME+ROUNDING");
  if (quant::rounding_input(rounding) == quant::RoundingInput::InputMoments)
    throw_bad_input(fmt::format("recipe {}: the demo rounds with nearest, mse or gptq; quantize with "
                                "rounding {} and evaluate the result with the others",
                                entry, quant::rounding_name(rounding)));
  return {entry.substr(0, plus), rounding};
}

// The run's texts: evaluation, calibration and prompts come from three
// different Austen novels unless a text is given (then calibration takes its end).
struct Texts {
  runtime::DefaultText eval, calib;
  runtime::DefaultPrompts prompts;
};

Texts texts_for(const DemoRequest& r) {
  Texts t;
  if (r.text.empty()) {
    t.eval = runtime::default_text(runtime::DefaultTextUse::Evaluation);
    t.calib = runtime::default_text(runtime::DefaultTextUse::Calibration);
  } else {
    t.eval = {io::read_file(r.text), r.text};
    t.calib = runtime::calibration_tail(t.eval);
  }
  t.prompts = runtime::prompts_or_default(r.prompts, r.eval.max_prompts);
  return t;
}

class Demo {
 public:
  explicit Demo(DemoRequest r) : r_(std::move(r)), model_(runtime::demo_model(r_.model)) {
    for (const auto& entry : r_.recipes) entries_.push_back(recipe_and_rounding(entry));  // before any work
    if (r_.gguf.empty()) r_.gguf = runtime::find_demo_gguf(model_);
    if (r_.planned_bpw < 0) r_.planned_bpw = model_.planned_bpw;
    if (r_.planned_refine < 0) r_.planned_refine = model_.planned_refine;
    texts_ = texts_for(r_);
    base_ = path(fmt::format("{}-bf16", model_.dir_prefix));
  }

  DemoResult run() {
    fs::create_directories(r_.workdir);
    import_base();
    calibrate();
    std::vector<std::string> outs;
    for (const auto& [name, rounding] : entries_) outs.push_back(quantize_recipe(name, rounding));
    if (r_.planned_bpw > 0) outs.push_back(quantize_planned_mix());
    return evaluate(outs);
  }

 private:
  std::string path(const std::string& name) const { return (fs::path(r_.workdir) / name).string(); }
  void say(const std::string& s) const {
    if (r_.say) r_.say(s);
  }
  bool reuse(const std::string& dst) const {
    if (r_.force || !fs::exists(fs::path(dst) / "config.json")) return false;
    say(fmt::format("reusing {}", dst));
    return true;
  }

  void import_base() {
    if (!r_.force && fs::exists(fs::path(base_) / "model.safetensors")) {
      say(fmt::format("reusing {}", base_));
      return;
    }
    say(fmt::format("importing {} -> {}", r_.gguf, base_));
    runtime::import_gguf(r_.gguf, base_, {true});
  }

  // Static activation scales (NVFP4 W4A4) come from a calibration on text the evaluation never reads.
  void calibrate() {
    const std::string calib_path = path("calibration.json");
    say(fmt::format("calibrating activation amax on {}", texts_.calib.source));
    auto cal = calibration::calibrate(base_, texts_.calib.text, texts_.calib.source, 1024, 256);
    cal.save(calib_path);
    plan_options_.activation_amax = cal.amax;
    plan_options_.calibration_path = calib_path;
    plan_options_.calibration = cal.text_provenance;
    plan_options_.calibration["path"] = calib_path;
  }

  void quantize_to(const std::string& recipe_path, const std::string& dst, quant::Rounding rounding) const {
    pipeline::QuantizeOptions qo;
    qo.overwrite = true;
    qo.before_commit = report::write_checkpoint_report;
    // gptq: on the default calibration text, as `selq quantize --rounding gptq` (run only for those).
    calibration::GptqPassOptions pass;
    pass.max_tokens = r_.gptq_tokens;
    pass.on_progress = r_.say;
    calibration::use_gptq_pass(qo, pass, dst);
    auto recipe = recipe::with_rounding(recipe::load_recipe(recipe_path), rounding);
    pipeline::quantize({base_, dst, false, std::move(recipe), plan_options_}, qo);
    calibration::remove_gptq_work_dir(dst);
  }

  std::string quantize_recipe(const std::string& name, quant::Rounding rounding) const {
    const std::string recipe_path = r_.recipes_dir.empty() ? recipe::resolve_recipe_path(name)
                                                           : (fs::path(r_.recipes_dir) / (name + ".yaml")).string();
    const std::string suffix =
        rounding == quant::Rounding::Nearest ? "" : fmt::format("-{}", quant::rounding_name(rounding));
    const std::string dst = path(fmt::format("{}-{}{}", model_.dir_prefix, name, suffix));
    if (reuse(dst)) return dst;
    say(fmt::format("quantizing with {}{} -> {}", recipe_path,
                    suffix.empty() ? "" : fmt::format(", rounding {}", quant::rounding_name(rounding)), dst));
    quantize_to(recipe_path, dst, rounding);
    return dst;
  }

  // The planner's own choice at a budget between NVFP4 and FP8, from the
  // data-free tier (seconds; bench/planner/front.sh measures the other tiers).
  std::string quantize_planned_mix() const {
    const std::string name = fmt::format("planned-{}", r_.planned_bpw);
    const std::string dst = path(fmt::format("{}-{}", model_.dir_prefix, name));
    if (reuse(dst)) return dst;
    auto ck = io::Checkpoint::open(base_);
    const std::string sens_path = path("sensitivity.json");
    const auto dialect = exporter::Dialect::CompressedTensors;
    auto layout = planner::decision_units(*ck, dialect);
    auto table = planner::data_free_sensitivity(
        *ck, layout, planner::select_candidates({}, planner::Hardware::Blackwell, dialect));
    io::write_file_atomic(sens_path, table.to_json().dump(1) + "\n");
    planner::TargetRequest req;
    req.sensitivity_path = sens_path;
    req.target_bpw = r_.planned_bpw;
    req.hardware = planner::Hardware::Blackwell;
    req.recipe_name = name;
    req.refine = r_.planned_refine;
    req.refine_text = {texts_.calib.text, texts_.calib.source, 256};
    if (req.refine > 0)
      say(fmt::format("refining it with {} end-to-end measurements on {}", req.refine, texts_.calib.source));
    auto planned = planner::plan_target(*ck, req);
    const std::string recipe_path = path(name + ".yaml");
    io::write_file_atomic(recipe_path, planned.recipe_yaml);
    say(fmt::format("planned a {:.3f}-bpw mix for Blackwell formats from data-free sensitivity{} -> {}",
                    planned.mix->bits_per_weight,
                    planned.refinement ? fmt::format(", refined (calibration KL {:.4f} -> {:.4f})",
                                                     planned.refinement->start_loss, planned.refinement->loss)
                                       : "",
                    recipe_path));
    quantize_to(recipe_path, dst, quant::Rounding::Nearest);
    return dst;
  }

  // eval.json, and the report of the best mix: the planned one, else the lowest mean KL.
  DemoResult evaluate(const std::vector<std::string>& outs) const {
    say(fmt::format("evaluating on {} (max {} tokens, context {}); draft acceptance on {}", texts_.eval.source,
                    r_.eval.max_tokens, r_.eval.context,
                    texts_.prompts.prompts.empty() ? "no prompts" : texts_.prompts.source));
    auto rep = runtime::evaluate(base_, outs, texts_.eval.text, texts_.eval.source, texts_.prompts.prompts,
                                 texts_.prompts.source, r_.eval);
    DemoResult res;
    res.baseline = model_.baseline;
    res.table = rep.table();
    res.json = rep.to_json();
    res.json["gguf"] = r_.gguf;
    res.json["model"] = model_.name;
    res.json["baseline_note"] =
        fmt::format("the BF16 baseline is {}: it already carries that GGUF's rounding", model_.baseline);
    const std::string eval_path = path("eval.json");
    std::ofstream(eval_path) << res.json.dump(2) << "\n";
    if (rep.quantized.empty()) return res;
    std::size_t best = 0;
    for (std::size_t i = 1; i < rep.quantized.size(); ++i)
      if (rep.quantized[i].kl_mean < rep.quantized[best].kl_mean) best = i;
    if (r_.planned_bpw > 0) best = rep.quantized.size() - 1;
    report::ReportOptions ro;
    ro.eval_path = eval_path;
    ro.source = base_;
    const fs::path sens = path("sensitivity.json");
    if (r_.planned_bpw > 0 && fs::exists(sens)) ro.sensitivity_path = sens.string();
    res.report_path = path("report.html");
    res.report_of = rep.quantized[best].path;
    io::write_file_atomic(res.report_path, report::build_report(res.report_of, ro).html);
    res.json["report"] = res.report_path;
    return res;
  }

  DemoRequest r_;
  const runtime::DemoModel& model_;
  std::vector<std::pair<std::string, quant::Rounding>> entries_;
  Texts texts_;
  std::string base_;
  pipeline::PlanOptions plan_options_;
};

}  // namespace

runtime::EvalOptions demo_eval_options() {
  runtime::EvalOptions o;
  o.max_tokens = 1024;
  o.context = 128;
  o.max_prompts = 16;
  o.gen_tokens = 16;
  o.base_cache_dir = runtime::default_base_logprobs_dir();  // a rerun evaluates the base from the cache
  return o;
}

DemoResult run_demo(DemoRequest request) { return Demo(std::move(request)).run(); }

}  // namespace selq::demo
