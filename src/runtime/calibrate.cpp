// Activation amax through the runtime's linear hook.
#include "runtime/calibrate.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/eval.h"
#include "runtime/causal_lm.h"
#include "runtime/text_overlap.h"

namespace selq::runtime {

nlohmann::json CalibrationResult::to_json() const {
  nlohmann::json a = nlohmann::json::object();
  for (const auto& [m, v] : amax) a[m] = v;
  return {{"format", "selq-calibration-v1"}, {"model", model},     {"text", text_source},
          {"tokens", tokens},                {"context", context}, {"text_provenance", text_provenance},
          {"activation_amax", a}};
}

void record_input_amax(std::map<std::string, float>& amax, const Linear& l, const float* x, std::int64_t rows) {
  float m = 0;
  for (std::int64_t i = 0; i < rows * l.in; ++i) m = std::max(m, std::fabs(x[i]));
  float& slot = amax[l.module];
  slot = std::max(slot, m);
}

CalibrationResult calibrate(const std::string& checkpoint, const std::string& text, const std::string& text_source,
                            std::int64_t max_tokens, std::int64_t context,
                            const std::function<void(std::uint64_t, std::uint64_t)>& on_progress) {
  if (context < 1) throw_bad_input("calibration context must be at least 1 token");
  const Tokenizer tok = tokenizer_of(checkpoint);
  auto toks = tok.encode(text);
  if (max_tokens > 0 && static_cast<std::int64_t>(toks.size()) > max_tokens)
    toks.resize(static_cast<std::size_t>(max_tokens));
  if (toks.empty()) throw_bad_input(fmt::format("{}: no tokens to calibrate on", text_source));
  auto model = load_model(checkpoint);
  CalibrationResult r;
  r.model = checkpoint;
  r.text_source = text_source;
  r.tokens = static_cast<std::int64_t>(toks.size());
  r.context = context;
  r.text_provenance =
      text_provenance(text_source, std::string_view(text).substr(0, covered_bytes(tok, toks, text.size())));
  model->set_activation_hook(
      [](void* ctx, const Linear& l, const float* x, std::int64_t rows) {
        record_input_amax(*static_cast<std::map<std::string, float>*>(ctx), l, x, rows);
      },
      &r.amax);
  const auto n = static_cast<std::int64_t>(toks.size());
  const std::uint64_t windows = static_cast<std::uint64_t>((n + context - 1) / context);
  for (std::int64_t b = 0, w = 0; b < n; b += context, ++w) {
    model->reset();
    model->forward(std::span(toks).subspan(static_cast<std::size_t>(b),
                                           static_cast<std::size_t>(std::min(context, n - b))),
                   false);
    if (on_progress) on_progress(static_cast<std::uint64_t>(w + 1), windows);
  }
  return r;
}

}  // namespace selq::runtime
