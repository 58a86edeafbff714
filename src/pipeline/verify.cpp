// verify: what a checkpoint's readers will see. The config is read through
// the same engine mimics the writers are tested against, so a finding here
// is a layer an engine would load differently from how it is stored.
#include "pipeline/verify.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "core/codecs.h"
#include "core/error.h"
#include "export/dialect_read.h"
#include "export/engine_resolve.h"
#include "export/module_names.h"
#include "export/native_fp8.h"
#include "io/rotation_record.h"
#include "io/xxh3.h"
#include "pipeline/manifest.h"
#include "quant/scheme_traits.h"
#include "recipe/fused_modules.h"
#include "recipe/names.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

using nlohmann::json;
using quant::OutRole;
using quant::SchemeSpec;

namespace {

struct Ctx {
  const io::Checkpoint& ckpt;
  VerifyResult& out;
  void add(std::string check, std::string file, std::string tensor, std::string problem) {
    out.findings.push_back({std::move(check), std::move(file), std::move(tensor), std::move(problem)});
  }
  void note(std::string check, std::string file, std::string tensor, std::string problem) {
    out.notes.push_back({std::move(check), std::move(file), std::move(tensor), std::move(problem)});
  }
  std::string shard_of(const std::string& tensor) const {
    const auto* t = ckpt.find(tensor);
    return t ? t->shard : std::string();
  }
};

std::optional<json> read_json_file(const fs::path& p) {
  std::ifstream f(p);
  if (!f) return std::nullopt;
  try {
    return json::parse(f);
  } catch (const json::exception& e) {
    throw_bad_input(fmt::format("not valid JSON: {}", e.what()), {p.string()});
  }
}

// The weight tensor of a module as stored: ".weight" or compressed-tensors' ".weight_packed".
const io::CheckpointTensor* stored_weight(const io::Checkpoint& ckpt, const std::string& module) {
  if (const auto* t = ckpt.find(module + ".weight")) return t;
  return ckpt.find(module + ".weight_packed");
}

bool stored_quantized(const io::Checkpoint& ckpt, const std::string& module) {
  const auto* w = stored_weight(ckpt, module);
  if (!w) return false;
  if (!dtype_is_float_source(w->info.dtype)) return true;
  return ckpt.find(module + ".weight_scale") || ckpt.find(module + ".weight_scale_inv");
}

// What the stored tensors of each module look like, independent of any
// config: two modules with different signatures cannot be one engine layer.
std::map<std::string, std::string> stored_signatures(const io::Checkpoint& ckpt) {
  std::map<std::string, std::string> sig;
  for (const auto& t : ckpt.tensors()) {
    std::string suffix = exporter::last_component(t.info.name);
    if (suffix == "bias") continue;
    sig[exporter::parent_of(t.info.name)] +=
        fmt::format("{}:{}:{}d ", suffix, dtype_name(t.info.dtype), t.info.shape.size());
  }
  return sig;
}

// Linear modules as the engines see them: every module with a 2-D/3-D
// weight except embeddings and norms.
std::vector<std::string> linear_modules(const io::Checkpoint& ckpt) {
  std::set<std::string> out;
  for (const auto& t : ckpt.tensors()) {
    const std::string& n = t.info.name;
    std::string last = exporter::last_component(n);
    if (last != "weight" && last != "weight_packed") continue;
    if (last == "weight" && t.info.shape.size() < 2) continue;
    std::string module = exporter::parent_of(n);
    recipe::detail::NameInfo info(module);
    bool linear = true;
    auto kind = recipe::detail::protected_kind(info, linear);
    if (!kind.empty() && !linear) continue;
    out.insert(module);
  }
  return {out.begin(), out.end()};
}

std::optional<exporter::Dialect> dialect_of(const json& qc, const json* manifest) {
  if (manifest && manifest->contains("dialect") && (*manifest)["dialect"].is_string())
    if (auto d = exporter::dialect_from_name((*manifest)["dialect"].get<std::string>())) return d;
  return exporter::dialect_of_config(qc);
}

// ---------------- manifest vs files ----------------

void check_manifest(Ctx& c, const json& manifest, json& report) {
  std::set<std::string> listed;
  std::size_t checked = 0;
  for (const auto& e : manifest.value("tensors", json::array())) {
    for (const auto& o : e.value("outputs", json::array())) {
      std::string name = o.value("name", "");
      std::string shard = o.value("shard", "");
      listed.insert(name);
      const auto* t = c.ckpt.find(name);
      if (!t) {
        c.add("manifest", shard, name, "listed in the manifest but missing from the checkpoint");
        continue;
      }
      ++checked;
      if (!shard.empty() && t->shard != shard)
        c.add("manifest", t->shard, name, fmt::format("manifest says shard {}", shard));
      std::string dt = std::string(dtype_name(t->info.dtype));
      if (o.value("dtype", "") != dt)
        c.add("manifest", t->shard, name, fmt::format("dtype {} but manifest says {}", dt, o.value("dtype", "")));
      if (o.value("shape", json()) != json(t->info.shape))
        c.add("manifest", t->shard, name,
              fmt::format("shape {} but manifest says {}", shape_to_string(t->info.shape), o.value("shape", json()).dump()));
      std::string want = o.value("xxh3", "");
      if (!want.empty()) {
        auto v = c.ckpt.view(name);
        std::string got = hash_hex(XXH3_64bits(v.bytes.data(), v.bytes.size()));
        if (got != want)
          c.add("manifest", t->shard, name, fmt::format("xxh3 {} but manifest says {} (bytes changed)", got, want));
      }
    }
  }
  for (const auto& t : c.ckpt.tensors())
    if (!listed.count(t.info.name)) c.add("manifest", t.shard, t.info.name, "not listed in the manifest");
  report["manifest"] = {{"outputs_checked", checked}, {"tensors_listed", listed.size()}};
}

// ---------------- tensors a scheme requires ----------------

struct ModuleScheme {
  SchemeSpec spec;
  Shape shape;                           // unquantized weight shape
  std::vector<quant::OutTensorSpec> outs;
  std::vector<std::string> names;        // stored tensor name per output
};

using TensorNameOf = std::function<std::string(OutRole)>;

// Checks the tensors `spec` needs for `module`, named by `name_of`; returns
// them when all exist with the right dtype and shape.
std::optional<ModuleScheme> check_scheme_tensors(Ctx& c, const TensorNameOf& name_of, const SchemeSpec& spec,
                                                 const std::string& module, const std::string& why) {
  const auto* w = stored_weight(c.ckpt, module);
  std::string wname = name_of(OutRole::Weight);
  const auto* wt = c.ckpt.find(wname);
  if (!wt) {
    c.add("structure", w ? w->shard : "", wname,
          fmt::format("{} resolves to {} but the tensor is missing{}", why, spec.name(),
                      w ? fmt::format(" (stored weight is {} {})", w->info.name, dtype_name(w->info.dtype)) : ""));
    return std::nullopt;
  }
  auto shape = quant::unquantized_weight_shape(spec, wt->info.dtype, wt->info.shape);
  if (!shape) {
    c.add("structure", wt->shard, wname,
          fmt::format("{} resolves to {}, which cannot produce a {} {} weight", why, spec.name(),
                      dtype_name(wt->info.dtype), shape_to_string(wt->info.shape)));
    return std::nullopt;
  }
  ModuleScheme ms{spec, *shape, quant::scheme_outputs(spec, *shape), {}};
  // A static activation mode stores its calibrated scale next to the weight.
  try {
    if (auto act = quant::activation_scale_output(spec, *shape)) ms.outs.push_back(*act);
  } catch (const Error& e) {
    c.add("structure", wt->shard, wname, fmt::format("{}: {}", why, e.message()));
    return std::nullopt;
  }
  bool ok = true;
  for (const auto& o : ms.outs) {
    std::string name = name_of(o.role);
    ms.names.push_back(name);
    const auto* t = c.ckpt.find(name);
    if (!t) {
      c.add("structure", wt->shard, name, fmt::format("missing: {} needs {} {}", spec.name(), dtype_name(o.dtype),
                                                      shape_to_string(o.shape)));
      ok = false;
    } else if (t->info.dtype != o.dtype || t->info.shape != o.shape) {
      c.add("structure", t->shard, name,
            fmt::format("stored {} {} but {} needs {} {}", dtype_name(t->info.dtype), shape_to_string(t->info.shape),
                        spec.name(), dtype_name(o.dtype), shape_to_string(o.shape)));
      ok = false;
    }
  }
  if (!ok) return std::nullopt;
  return ms;
}

// ---------------- numeric ----------------

void check_scales(Ctx& c, const ModuleScheme& ms) {
  for (std::size_t i = 0; i < ms.outs.size(); ++i) {
    const auto& o = ms.outs[i];
    if (o.role != OutRole::Scale && o.role != OutRole::GlobalScale && o.role != OutRole::InputScale) continue;
    auto v = c.ckpt.view(ms.names[i]);
    const std::string shard = c.shard_of(ms.names[i]);
    const std::uint64_t n = shape_numel(o.shape);
    std::uint64_t bad = 0, first = 0;
    std::string what;
    if (o.dtype == DType::U8 || o.dtype == DType::F8_E8M0) {
      what = "E8M0 0xFF (NaN)";
      for (std::uint64_t k = 0; k < n; ++k)
        if (v.bytes[k] == 0xFF && bad++ == 0) first = k;
    } else if (o.dtype == DType::F8_E4M3) {
      what = "E4M3 NaN";
      for (std::uint64_t k = 0; k < n; ++k)
        if ((v.bytes[k] & 0x7F) == 0x7F && bad++ == 0) first = k;
    } else if (dtype_is_float_source(o.dtype)) {
      const bool global = o.role == OutRole::GlobalScale || o.role == OutRole::InputScale;
      what = o.role == OutRole::InputScale ? "zero, negative, NaN or Inf input scale"
             : global                      ? "zero, negative, NaN or Inf global scale"
                                           : "NaN, Inf or negative scale";
      for (std::uint64_t k = 0; k < n; ++k) {
        float x = load_float_element(o.dtype, v.bytes.data(), k);
        bool b = !std::isfinite(x) || x < 0 || (global && x == 0);
        if (b && bad++ == 0) first = k;
      }
    }
    if (bad)
      c.add("numeric", shard, ms.names[i], fmt::format("{} {} value(s), first at element {}", bad, what, first));
  }
}

// GPTQ trades weight error for output error: a tensor the manifest says was
// rounded `gptq` may err up to this many times the scheme's budget (an expert
// of the synthetic MoE that few calibration tokens reached erred 0.209 against nvfp4's 0.2).
constexpr double kGptqBudgetFactor = 1.5;

// Relative Frobenius error of the dequantized weight against the source.
void check_against(Ctx& c, const ModuleScheme& ms, const std::string& module, const io::Checkpoint& src,
                   bool gptq, json& errors) {
  const auto* s = src.find(module + ".weight");
  const std::string wname = ms.names.empty() ? module : ms.names[0];
  if (!s) {
    // Already quantized in the source (kept as is): nothing float to compare.
    if (!stored_weight(src, module))
      c.add("error-bound", c.shard_of(wname), module, "no such weight in the reference checkpoint");
    return;
  }
  if (!dtype_is_float_source(s->info.dtype)) return;  // already quantized in the source: nothing to compare
  if (s->info.shape != ms.shape) {
    c.add("error-bound", c.shard_of(wname), module,
          fmt::format("source shape {} but stored tensors decode to {}", shape_to_string(s->info.shape),
                      shape_to_string(ms.shape)));
    return;
  }
  std::vector<std::span<const std::uint8_t>> spans;
  for (std::size_t i = 0; i < ms.names.size(); ++i)
    if (ms.outs[i].role != OutRole::InputScale) spans.push_back(c.ckpt.view(ms.names[i]).bytes);
  std::vector<float> dq = quant::dequantize_weight(ms.spec, ms.shape, spans);
  auto sv = src.view(s->info.name);
  const std::uint64_t n = shape_numel(ms.shape);
  std::vector<float> ref(n);
  load_floats(s->info.dtype, sv.bytes.data(), 0, n, ref.data());
  double num = 0, den = 0;
  for (std::uint64_t k = 0; k < n; ++k) {
    double e = static_cast<double>(ref[k]) - dq[k];
    num += e * e;
    den += static_cast<double>(ref[k]) * ref[k];
  }
  double rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? INFINITY : 0.0);
  double budget = quant::error_budget(ms.spec) * (gptq ? kGptqBudgetFactor : 1.0);
  errors[module] = {{"scheme", ms.spec.name()}, {"rel_frobenius", rel}, {"budget", budget}};
  if (gptq) errors[module]["rounding"] = "gptq";
  if (!(rel <= budget))
    c.add("error-bound", c.shard_of(wname), module,
          fmt::format("relative error {:.4f} against the source exceeds the {} budget {}", rel, ms.spec.name(), budget));
}

// Engines take the largest of a fused module's NVFP4 global scales for all
// its shards (vLLM 0.32 compressed_tensors_w4a4_nvfp4.py, modelopt.py), so a
// shard written with another one dequantizes wrongly.
void check_shared_global_scales(Ctx& c, const std::map<std::string, ModuleScheme>& verified) {
  std::map<std::string, std::vector<std::pair<std::string, float>>> by_group;
  for (const auto& [m, ms] : verified) {
    if (!quant::scheme_traits(ms.spec.kind).fused_group_amax) continue;
    const std::string group = recipe::fused_shard_key(m);
    if (group.empty()) continue;
    for (std::size_t i = 0; i < ms.outs.size(); ++i)
      if (ms.outs[i].role == OutRole::GlobalScale && shape_numel(ms.outs[i].shape) == 1) {
        const auto v = c.ckpt.view(ms.names[i]);
        by_group[group].emplace_back(ms.names[i], load_float_element(ms.outs[i].dtype, v.bytes.data(), 0));
      }
  }
  for (const auto& [group, scales] : by_group)
    for (const auto& [name, value] : scales)
      if (value != scales.front().second) {
        c.add("numeric", c.shard_of(name), name,
              fmt::format("NVFP4 global scale {} differs from {} of {} ({}): engines load {} as one module with "
                          "the largest",
                          value, scales.front().first, group, scales.front().second, group));
        break;
      }
}

// ---------------- config entries that name nothing ----------------

bool entry_names_something(const std::string& e, const std::vector<std::string>& names) {
  for (const auto& n : names) {
    if (e.starts_with("re:")) {
      if (exporter::py_re_search(e.substr(3), n)) return true;
      continue;
    }
    if (n == e || n.starts_with(e + ".") || exporter::py_fnmatch(n, e) || n.find(e) != std::string::npos ||
        e.find(n) != std::string::npos)
      return true;
  }
  return false;
}

void check_dead_entries(Ctx& c, exporter::Dialect d, const json& qc, const std::vector<std::string>& modules) {
  std::vector<std::string> names = modules;
  for (auto fam : {exporter::EngineFamily::Vllm, exporter::EngineFamily::Sglang, exporter::EngineFamily::Atom})
    for (const auto& em : exporter::engine_modules(fam, modules)) names.push_back(em.name);
  for (const auto& [where, e] : exporter::config_module_entries(d, qc)) {
    // Presets carry generic patterns, and lm_head may be listed although the
    // checkpoint ties it to the embedding: legal, so a note.
    if (!entry_names_something(e, names))
      c.note("config", "config.json", e, fmt::format("quantization_config.{} entry names no module", where));
  }
}

// Block FP8 as DeepSeek-V3 ships it: vLLM's Fp8Config builds every linear in
// block FP8 but those it skips (modules_to_not_convert) and those it builds
// without quant_config (router, heads).
void check_native_fp8(Ctx& c, const exporter::NativeFp8& f, const std::vector<std::string>& modules,
                      std::map<std::string, ModuleScheme>& verified) {
  for (const auto& m : modules) {
    const auto* w = stored_weight(c.ckpt, m);
    const bool skipped = exporter::native_fp8_not_converted(f, m);
    if (w->info.dtype == DType::F8_E4M3) {
      if (skipped) {
        c.add("engine", w->shard, m, "stored in FP8 but listed in modules_to_not_convert: vLLM builds it unquantized");
        continue;
      }
      const TensorNameOf name_of = [&](OutRole r) { return exporter::native_fp8_tensor(m, r); };
      if (auto ms = check_scheme_tensors(c, name_of, f.scheme, m, "quant_method fp8"))
        verified.emplace(m, std::move(*ms));
      continue;
    }
    if (stored_quantized(c.ckpt, m)) {
      c.add("structure", w->shard, m,
            fmt::format("stored as {} with scales, which quant_method fp8 (block FP8) does not describe",
                        dtype_name(w->info.dtype)));
      continue;
    }
    bool linear = true;
    const bool engine_float = !recipe::detail::protected_kind(recipe::detail::NameInfo(m), linear).empty();
    if (!skipped && !engine_float)
      c.add("engine", w->shard, m,
            fmt::format("stored in float ({}) but vLLM's Fp8Config builds it in block FP8 (it is not in "
                        "modules_to_not_convert)",
                        dtype_name(w->info.dtype)));
  }
}

}  // namespace

std::string format_finding(const VerifyFinding& f) {
  std::string s = f.file.empty() ? std::string("-") : f.file;
  if (!f.tensor.empty()) s += ": " + f.tensor;
  return s + ": [" + f.check + "] " + f.problem;
}

namespace {

// What the manifest says each module was quantized with, and which modules
// GPTQ rounded (a larger weight error is expected of them).
struct ManifestSchemes {
  std::map<std::string, std::string> scheme;  // module -> SchemeSpec::name()
  std::set<std::string> gptq;
};

ManifestSchemes manifest_schemes(const std::optional<json>& manifest) {
  ManifestSchemes out;
  if (!manifest) return out;
  for (const auto& e : manifest->value("tensors", json::array()))
    if (e.contains("module") && e.contains("scheme")) {
      out.scheme[e["module"].get<std::string>()] = e["scheme"].get<std::string>();
      if (e.value("rounding", "") == "gptq") out.gptq.insert(e["module"].get<std::string>());
    }
  return out;
}

// The checks of a checkpoint in one of selq's dialects: the manifest's
// schemes, then each engine's resolution of every module; `verified` gets
// each module whose tensors all check out under the scheme found.
class DialectCheck {
 public:
  DialectCheck(Ctx& c, exporter::Dialect dialect, const json& qc, const ManifestSchemes& manifest,
               std::map<std::string, ModuleScheme>& verified)
      : c_(c), d_(dialect), qc_(qc), manifest_(manifest), verified_(verified),
        model_dtype_(io::model_float_dtype(c.ckpt)), modules_(linear_modules(c.ckpt)) {
    // Heads the engines build with no stored weight count as modules: an
    // exclusion naming one is what keeps the engine from quantizing it.
    std::vector<std::string> tensor_names;
    for (const auto& t : c.ckpt.tensors()) tensor_names.push_back(t.info.name);
    unstored_heads_ = exporter::unstored_head_modules(tensor_names);
    engine_built_ = modules_;
    engine_built_.insert(engine_built_.end(), unstored_heads_.begin(), unstored_heads_.end());
  }

  json run() {
    check_dead_entries(c_, d_, qc_, engine_built_);
    // Manifest schemes first, so the tensors are checked against what was written.
    for (const auto& [m, name] : manifest_.scheme) {
      auto spec = exporter::scheme_from_name(d_, name, model_dtype_);
      if (!spec) {
        c_.add("manifest", "", m, fmt::format("unknown scheme '{}' in the manifest", name));
        continue;
      }
      take_scheme(*spec, m, "the manifest");
    }
    json engines = json::object();
    sigs_ = stored_signatures(c_.ckpt);
    for (auto e : exporter::engines_for(d_)) engines[exporter::engine_name(e)] = check_engine(e);
    return engines;
  }

 private:
  void take_scheme(const SchemeSpec& spec, const std::string& module, const std::string& why) {
    auto it = verified_.find(module);
    if (it != verified_.end() && it->second.spec == spec) return;
    const exporter::Dialect d = d_;
    const TensorNameOf name_of = [&](OutRole r) { return exporter::output_tensor_name(d, spec, r, module); };
    if (auto ms = check_scheme_tensors(c_, name_of, spec, module, why))
      if (it == verified_.end()) verified_.emplace(module, std::move(*ms));
  }

  // One engine's resolution of every module against what is stored; its counts for the report.
  json check_engine(exporter::Engine e) {
    const std::string en = exporter::engine_name(e);
    exporter::EngineResolver r(e, qc_, engine_built_);
    for (const auto& h : unstored_heads_)
      if (auto problem = exporter::unstored_head_problem(r, e, h)) c_.add("engine", "config.json", h, *problem);
    Counts n;
    std::map<std::string, std::vector<std::string>> groups;  // engine module -> members
    for (const auto& m : modules_) {
      std::optional<json> res;
      try {
        res = r.resolve(m);
      } catch (const Error& err) {
        ++n.errors;
        c_.add("engine", "config.json", m, err.message());
        continue;
      }
      groups[r.engine_module(m)].push_back(m);
      check_resolved(en, m, res, n);
    }
    check_fused_groups(groups);
    return {{"quantized", n.quantized}, {"float", n.floats}, {"errors", n.errors}, {"schemes", n.by_scheme}};
  }

  struct Counts {
    std::size_t quantized{0}, floats{0}, errors{0};
    std::map<std::string, std::size_t> by_scheme;
  };

  // Module `m` as engine `en` resolved it (`res`: its scheme's config, or
  // none for float) against how it is stored and what the manifest says.
  void check_resolved(const std::string& en, const std::string& m, const std::optional<json>& res, Counts& n) {
    const std::string file = c_.shard_of(stored_weight(c_.ckpt, m)->info.name);
    const bool stored_q = stored_quantized(c_.ckpt, m);
    if (!res) {
      ++n.floats;
      ++n.by_scheme["float"];
      if (stored_q)
        c_.add("engine", file, m,
               fmt::format("stored quantized ({}) but {} builds it unquantized",
                           dtype_name(stored_weight(c_.ckpt, m)->info.dtype), en));
      return;
    }
    ++n.quantized;
    auto spec = exporter::scheme_from_config_json(d_, *res, model_dtype_);
    ++n.by_scheme[spec ? spec->name() : "unrecognized"];
    if (!stored_q) {
      c_.add("engine", file, m,
             fmt::format("stored in float ({}) but {} resolves {}", dtype_name(stored_weight(c_.ckpt, m)->info.dtype),
                         en, spec ? spec->name() : res->dump()));
      return;
    }
    if (!spec) {
      // A scheme selq cannot read: the engine still quantizes the module,
      // so unless the manifest checked its tensors, nothing has.
      if (!manifest_.scheme.count(m))
        c_.add("engine", file, m,
               fmt::format("{} resolves a scheme selq does not recognise, so its tensors are unchecked: {}", en,
                           res->dump()));
      return;
    }
    auto ms = manifest_.scheme.find(m);
    if (ms != manifest_.scheme.end() && ms->second != spec->name()) {
      c_.add("engine", file, m, fmt::format("{} resolves {} but the manifest says {}", en, spec->name(), ms->second));
      return;
    }
    take_scheme(*spec, m, en);
  }

  // Members of one engine layer must be stored alike; otherwise the engine
  // loads some of them with the wrong scheme.
  void check_fused_groups(const std::map<std::string, std::vector<std::string>>& groups) {
    for (const auto& [em, members] : groups) {
      if (members.size() < 2) continue;
      const std::string& sig0 = sigs_[members[0]];
      for (std::size_t i = 1; i < members.size(); ++i)
        if (sigs_[members[i]] != sig0) {
          c_.add("engine", c_.shard_of(stored_weight(c_.ckpt, members[i])->info.name), em,
                 fmt::format("fused group inconsistent: {} stored as {}but {} as {}", members[0], sig0, members[i],
                             sigs_[members[i]]));
          break;
        }
    }
  }

  Ctx& c_;
  const exporter::Dialect d_;
  const json& qc_;
  const ManifestSchemes& manifest_;
  std::map<std::string, ModuleScheme>& verified_;
  const DType model_dtype_;
  const std::vector<std::string> modules_;
  std::vector<std::string> unstored_heads_, engine_built_;
  std::map<std::string, std::string> sigs_;  // module -> how it is stored
};

json findings_json(const std::vector<VerifyFinding>& findings) {
  json out = json::array();
  for (const auto& f : findings)
    out.push_back({{"check", f.check}, {"file", f.file}, {"tensor", f.tensor}, {"problem", f.problem}});
  return out;
}

// A rotated output's weights are of the rotated source: comparing them with
// another basis would report every module. Refused in one line instead.
void check_same_rotation(const io::Checkpoint& out, const io::Checkpoint& against) {
  if (out.is_remote() || against.is_remote()) return;
  const json a = io::read_rotation_record(out.dir()), b = io::read_rotation_record(against.dir());
  auto key = [](const json& r) {
    return r.is_null() ? std::string("none")
                       : fmt::format("{} (seed {}, block {})", r["rotation"].get<std::string>(), r.value("seed", 0),
                                     r.value("block", 0));
  };
  if (key(a) != key(b))
    throw_bad_input(fmt::format("{} carries rotation {} and {} carries {}: compare a rotated output with the rotated "
                                "checkpoint it was quantized from (the same kind, seed and block)",
                                out.dir(), key(a), against.dir(), key(b)),
                    {against.dir()});
}

}  // namespace

VerifyResult verify_checkpoint(const io::Checkpoint& ckpt, const VerifyOptions& options) {
  if (options.against) check_same_rotation(ckpt, *options.against);
  VerifyResult result;
  Ctx c{ckpt, result};
  json& report = result.report;
  report["checkpoint"] = ckpt.dir();

  const fs::path dir(ckpt.dir());
  std::optional<json> manifest = read_json_file(dir / kManifestName);
  report["has_manifest"] = manifest.has_value();
  if (manifest) check_manifest(c, *manifest, report);

  const json& config = ckpt.config();
  json qc = config.is_object() && config.contains("quantization_config") ? config["quantization_config"] : json();
  auto dialect = dialect_of(qc, manifest ? &*manifest : nullptr);
  if (dialect && qc.is_null())
    if (json side = exporter::side_file_config(ckpt.dir()); exporter::dialect_of_config(side) == dialect) qc = side;
  if (!qc.is_object()) qc = json::object();
  const std::vector<std::string> modules = linear_modules(ckpt);
  report["linear_modules"] = modules.size();
  const ManifestSchemes schemes = manifest_schemes(manifest);

  std::map<std::string, ModuleScheme> verified;  // module -> scheme whose tensors all check out
  const auto native_fp8 = exporter::native_fp8_config(qc, (dir / "config.json").string());
  if (auto method = exporter::unread_quant_method(qc)) {
    report["dialect"] = *method;
    c.add("config", "config.json", "",
          fmt::format("quantization_config.quant_method '{}' is not one selq reads: nothing of it is checked",
                      *method));
  } else if (native_fp8) {
    report["dialect"] = "fp8";
    check_native_fp8(c, *native_fp8, modules, verified);
  } else if (!dialect) {
    report["dialect"] = nullptr;
    for (const auto& m : modules)
      if (stored_quantized(ckpt, m))
        c.add("config", c.shard_of(stored_weight(ckpt, m)->info.name), m,
              "stored quantized but config.json has no quantization_config every engine reads it as float");
  } else {
    report["dialect"] = exporter::dialect_name(*dialect);
    report["engines"] = DialectCheck(c, *dialect, qc, schemes, verified).run();
  }

  check_shared_global_scales(c, verified);
  json errors = json::object();
  for (const auto& [m, ms] : verified) {
    check_scales(c, ms);
    if (options.against) check_against(c, ms, m, *options.against, schemes.gptq.contains(m), errors);
  }
  report["verified_modules"] = verified.size();
  if (options.against) report["errors"] = errors;
  report["findings"] = findings_json(result.findings);
  report["notes"] = findings_json(result.notes);
  report["ok"] = result.findings.empty();
  return result;
}

}  // namespace selq::pipeline
