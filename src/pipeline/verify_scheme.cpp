// Scheme reconstruction for verify. Rather than a second parser per dialect
// that could drift from the writers, every scheme selq can write is
// enumerated and written with the dialect's own writer; a config object (or
// a manifest name) is recognized when it equals one of them.
#include <map>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "pipeline/verify.h"

namespace selq::pipeline {

using quant::ActMode;
using quant::SchemeKind;
using quant::SchemeSpec;

namespace {

std::vector<SchemeSpec> base_candidates() {
  const ActMode acts[] = {ActMode::None,          ActMode::FP8PerToken,      ActMode::FP8PerTokenGroup128,
                          ActMode::FP8StaticTensor, ActMode::FP8DynamicTensor, ActMode::MXFP4Dynamic,
                          ActMode::MXFP8Dynamic,  ActMode::NVFP4};
  std::vector<SchemeSpec> out;
  for (auto act : acts) {
    auto add = [&](SchemeSpec s) {
      s.act = act;
      out.push_back(s);
    };
    for (auto kind : {SchemeKind::MXFP4, SchemeKind::MXFP8})
      for (auto rule : {ScaleRule::Even, ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil}) {
        SchemeSpec s;
        s.kind = kind;
        s.scale_rule = rule;
        add(s);
      }
    for (auto kind : {SchemeKind::NVFP4, SchemeKind::FP8Tensor, SchemeKind::FP8Channel, SchemeKind::FP8Block}) {
      SchemeSpec s;
      s.kind = kind;
      add(s);
    }
    for (int bits : {4, 8})
      for (bool sym : {true, false}) {
        SchemeSpec s;
        s.kind = SchemeKind::IntChannel;
        s.bits = bits;
        s.symmetric = sym;
        add(s);
        s.kind = SchemeKind::IntGroup;
        for (int g : {32, 64, 128, 256}) {
          s.group_size = g;
          add(s);
        }
      }
  }
  return out;
}

// Adapted candidates for one dialect and model dtype (cached: ~300 specs).
const std::vector<SchemeSpec>& candidates(exporter::Dialect d, DType model_dtype) {
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<SchemeSpec>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(d), static_cast<int>(model_dtype));
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::vector<SchemeSpec> out;
  for (const auto& s : base_candidates()) {
    try {
      exporter::check_dialect_supports(d, s);
      out.push_back(exporter::adapt_scheme_for_dialect(d, s, model_dtype));
    } catch (const Error&) {
      // The dialect cannot express it, so no config of that dialect names it.
    }
  }
  return cache.emplace(key, std::move(out)).first->second;
}

}  // namespace

std::optional<SchemeSpec> scheme_from_config_json(exporter::Dialect d, const nlohmann::json& scheme_json,
                                                  DType model_dtype) {
  // The candidates' config objects, in comparable form, built once per
  // dialect and dtype (verify asks once per module).
  static std::mutex mu;
  static std::map<std::pair<int, int>, std::vector<nlohmann::json>> cache;
  const auto key = std::make_pair(static_cast<int>(d), static_cast<int>(model_dtype));
  const auto& specs = candidates(d, model_dtype);  // before the lock: it takes its own
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    std::vector<nlohmann::json> jsons;
    for (const auto& s : specs) {
      try {
        const nlohmann::json c = exporter::scheme_config_json(d, s);
        jsons.push_back(exporter::comparable_scheme_config(d, c));
      } catch (const Error&) {
        jsons.emplace_back();  // not expressible: matches no config object
      }
    }
    it = cache.emplace(key, std::move(jsons)).first;
  }
  const nlohmann::json wanted = exporter::comparable_scheme_config(d, scheme_json);
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (!it->second[i].is_null() && it->second[i] == wanted) return specs[i];
  return std::nullopt;
}

std::optional<SchemeSpec> scheme_from_name(exporter::Dialect d, const std::string& name, DType model_dtype) {
  for (const auto& s : candidates(d, model_dtype))
    if (s.name() == name) return s;
  return std::nullopt;
}

double error_budget(const SchemeSpec& spec) {
  switch (spec.kind) {
    case SchemeKind::MXFP4: return 0.25;
    case SchemeKind::NVFP4: return 0.20;
    case SchemeKind::MXFP8:
    case SchemeKind::FP8Tensor:
    case SchemeKind::FP8Channel:
    case SchemeKind::FP8Block: return 0.06;
    case SchemeKind::IntChannel:
    case SchemeKind::IntGroup: return spec.bits == 4 ? 0.25 : 0.02;
  }
  return 0.25;
}

}  // namespace selq::pipeline
