// Activation amax through the runtime's linear hook.
#include "calibration/calibrate.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/expert_name.h"
#include "dist/assign.h"
#include "dist/ranks.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "runtime/eval/eval.h"
#include "runtime/model/causal_lm.h"
#include "runtime/text/text_overlap.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text

nlohmann::json CalibrationResult::to_json() const {
  nlohmann::json a = nlohmann::json::object();
  for (const auto& [m, v] : amax) a[m] = v;
  nlohmann::json j = {{"format", "selq-calibration-v1"}, {"model", model},     {"text", text_source},
                      {"tokens", tokens},                {"context", context}, {"text_provenance", text_provenance},
                      {"activation_amax", a}};
  if (!expert_tokens.empty()) {
    j["expert_tokens"] = expert_tokens;
    j["unreached_experts"] = unreached;
    j["unreached_expert_rule"] = kUnreachedExpertRule;
  }
  return j;
}

std::string input_moments_path_for(const std::string& json_path) {
  std::string base = json_path;
  if (base.size() > 5 && base.ends_with(".json")) base.resize(base.size() - 5);
  return base + ".moments.safetensors";
}

void CalibrationResult::save(const std::string& json_path) const {
  nlohmann::json j = to_json();
  if (!input_moments.empty()) {
    const std::string path = input_moments_path_for(json_path);
    std::vector<TensorInfo> infos;
    for (const auto& [m, v] : input_moments)
      infos.push_back({m, DType::F32, Shape{static_cast<std::int64_t>(v.size())}});
    io::SafetensorsWriter w(path, infos,
                            {{"format", "selq-input-moments-v1"},
                             {"definition", "per input channel of each linear module: mean of x^2 over the "
                                            "calibration tokens it saw"}});
    for (const auto& [m, v] : input_moments)
      w.write(m, std::span(reinterpret_cast<const std::uint8_t*>(v.data()), v.size() * sizeof(float)));
    const std::uint64_t hash = w.content_hash();
    const std::uint64_t bytes = w.total_size();
    w.commit();
    const auto slash = path.find_last_of('/');
    if (!expert_tokens.empty()) j["unreached_expert_moments_rule"] = kUnreachedExpertMomentsRule;
    j["input_moments"] = {{"file", slash == std::string::npos ? path : path.substr(slash + 1)},
                          {"bytes", bytes},
                          {"content_xxh3", fmt::format("{:016x}", hash)},
                          {"modules", input_moments.size()}};
  }
  io::write_file_atomic(json_path, j.dump(2) + "\n");
}

void SquareSums::add(const float* x, std::int64_t n, std::int64_t in) {
  window.resize(static_cast<std::size_t>(in), 0.0);
  sum.resize(static_cast<std::size_t>(in), 0);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t c = 0; c < in; ++c) {
      const double v = x[i * in + c];
      window[static_cast<std::size_t>(c)] += v * v;
    }
  window_rows += n;
}

void SquareSums::close_window(const std::string& module) {
  constexpr double kLimit = 0x1p78;  // 2^78 · 2^48 < 2^127: room for 2^49 such windows
  for (std::size_t c = 0; c < window.size(); ++c) {
    if (!(window[c] < kLimit))  // false for NaN
      throw_bad_input(fmt::format("{}: input channel {}'s sum of squares over a window is {}, beyond the moments' "
                                  "range (below 2^78)",
                                  module, c, window[c]));
    sum[c] += static_cast<Fixed>(std::ldexp(window[c], kFractionBits) + 0.5);  // to the nearest unit
    window[c] = 0.0;
  }
  rows += std::exchange(window_rows, 0);
}

std::vector<float> SquareSums::means() const {
  if (rows == 0) return {};
  std::vector<float> m(sum.size());
  for (std::size_t c = 0; c < m.size(); ++c)
    m[c] = static_cast<float>(std::ldexp(static_cast<double>(sum[c]), -kFractionBits) / static_cast<double>(rows));
  return m;
}

void SquareSums::append_limbs(std::vector<std::uint64_t>& out, std::size_t channels) const {
  for (std::size_t c = 0; c < channels; ++c) {
    const Fixed s = c < sum.size() ? sum[c] : 0;
    for (std::size_t k = 0; k < kLimbs; ++k) out.push_back(static_cast<std::uint32_t>(s >> (32 * k)));
  }
}

SquareSums::Fixed SquareSums::from_limbs(const std::uint64_t* limbs) {
  Fixed s = 0;
  for (std::size_t k = 0; k < kLimbs; ++k) s += static_cast<Fixed>(limbs[k]) << (32 * k);
  return s;
}

void record_input_amax(std::map<std::string, float>& amax, const Linear& l, const float* x, std::int64_t rows) {
  float m = 0;
  for (std::int64_t i = 0; i < rows * l.in; ++i) m = std::max(m, std::fabs(x[i]));
  float& slot = amax[l.module];
  slot = std::max(slot, m);
}

namespace {

// "model.layers.3.mlp.experts.7.down_proj" -> {"model.layers.3.mlp.experts.", "7", "down_proj"}.
struct ExpertName {
  std::string layer_prefix, expert, projection;
};
std::optional<ExpertName> routed_expert(const std::string& module) {
  const auto e = parse_routed_expert(module);
  if (!e || e->rest.empty()) return std::nullopt;
  return ExpertName{std::string(e->experts) + ".", std::string(e->index), std::string(e->rest)};
}

// The routed experts of one layer and projection: "model.layers.3.mlp.experts.*.down_proj".
std::string layer_projection(const ExpertName& e) { return e.layer_prefix + "*." + e.projection; }


struct HookState {
  CalibrationResult* r;
  std::map<std::string, SquareSums> sq;
};

// Every linear's input: its amax, its Σ x², and (a routed expert's gate_proj
// sees each routed token once) the tokens routed to each expert.
void record_input(void* ctx, const Linear& l, const float* x, std::int64_t rows) {
  auto& st = *static_cast<HookState*>(ctx);
  auto& res = *st.r;
  record_input_amax(res.amax, l, x, rows);
  st.sq[l.module].add(x, rows, l.in);
  if (auto e = routed_expert(l.module); e && e->projection == "gate_proj")
    res.expert_tokens[e->layer_prefix + e->expert] += rows;
}

// The model over windows [first, last) of the tokens in windows of `context`,
// every linear's input recorded; the Σ x² of each linear.
std::map<std::string, SquareSums> run_hooked(CausalLM& model, const std::vector<std::int32_t>& toks,
                                             std::int64_t context, std::int64_t first, std::int64_t last,
                                             CalibrationResult& r,
                                             const std::function<void(std::uint64_t, std::uint64_t)>& on_progress) {
  HookState state{&r, {}};
  model.set_activation_hook(record_input, &state);
  const auto n = static_cast<std::int64_t>(toks.size());
  for (std::int64_t w = first; w < last; ++w) {
    const std::int64_t b = w * context;
    model.reset();
    model.forward(std::span(toks).subspan(static_cast<std::size_t>(b), static_cast<std::size_t>(std::min(context, n - b))),
                  false);
    for (auto& [module, s] : state.sq) s.close_window(module);  // the ranks' unit: the same bits for any split
    if (on_progress) on_progress(static_cast<std::uint64_t>(w - first + 1), static_cast<std::uint64_t>(last - first));
  }
  model.set_activation_hook(nullptr, nullptr);
  return std::move(state.sq);
}

// Every rank's Σ x² summed into rank 0's `sq`, exactly: the modules of
// `shapes` in their order, each channel's limbs summed across ranks (a piece
// of at most kPieceChannels channels at a time, so a trillion-parameter
// model's moments need no more than ~128 MB at once on the way). `shapes`:
// module -> [rows, channels] of the whole run.
void sum_square_sums(dist::Ranks& ranks, const nlohmann::json& shapes, std::map<std::string, SquareSums>& sq) {
  constexpr std::size_t kPieceChannels = std::size_t{1} << 22;
  std::vector<std::uint64_t> limbs;
  std::vector<std::string> modules;  // of the piece
  auto exchange = [&] {
    ranks.sum_u64(limbs);
    const std::uint64_t* at = limbs.data();
    for (const std::string& m : ranks.rank() == 0 ? modules : std::vector<std::string>{}) {
      const auto& shape = shapes.at(m);
      SquareSums& s = sq[m];
      s.sum.assign(shape.at(1).get<std::size_t>(), 0);
      for (auto& v : s.sum) v = SquareSums::from_limbs(std::exchange(at, at + SquareSums::kLimbs));
      s.rows = shape.at(0).get<std::int64_t>();
    }
    limbs.clear();
    modules.clear();
  };
  for (const auto& [m, shape] : shapes.items()) {
    static const SquareSums kNone;  // a module this rank's windows never reached
    const auto it = sq.find(m);
    (it == sq.end() ? kNone : it->second).append_limbs(limbs, shape.at(1).get<std::size_t>());
    modules.push_back(m);
    if (limbs.size() >= kPieceChannels * SquareSums::kLimbs) exchange();
  }
  if (!modules.empty()) exchange();
}

// Under mpirun: every rank's amax and expert tokens gathered on rank 0 and
// merged (a max and integer sums: exact), with each module's rows and channel
// count; then the Σ x² summed exactly (sum_square_sums). So all of it is one
// process's. True on rank 0 (r and sq now the whole run's).
bool merge_on_rank_zero(dist::Ranks& ranks, CalibrationResult& r, std::map<std::string, SquareSums>& sq) {
  nlohmann::json mine = {{"amax", r.amax}, {"expert_tokens", r.expert_tokens}, {"moments", nlohmann::json::object()}};
  for (const auto& [m, s] : sq) mine["moments"][m] = {s.rows, s.sum.size()};
  const std::vector<std::string> all = ranks.gather_text(mine.dump());
  nlohmann::json shapes = nlohmann::json::object();  // module -> [rows, channels] over every rank
  for (const std::string& text : all) {
    const auto j = nlohmann::json::parse(text);
    for (const auto& [m, v] : j.at("moments").items()) {
      auto& shape = shapes[m];
      if (shape.is_null()) shape = {0, v.at(1)};
      shape[0] = shape[0].get<std::int64_t>() + v.at(0).get<std::int64_t>();
    }
    if (&text == &all.front()) continue;  // rank 0's own amax and tokens are r's
    for (const auto& [m, v] : j.at("amax").items()) {
      float& a = r.amax[m];
      a = std::max(a, v.get<float>());
    }
    for (const auto& [e, n] : j.at("expert_tokens").items()) r.expert_tokens[e] += n.get<std::int64_t>();
  }
  shapes = nlohmann::json::parse(ranks.broadcast_text(ranks.rank() == 0 ? shapes.dump() : std::string()));
  sum_square_sums(ranks, shapes, sq);
  return ranks.rank() == 0;
}

// Routed experts no token reached (listed in `unreached`): the largest amax of
// the layer's reached experts of the same projection, and their mean
// moments. Refused when no expert of a layer was reached.
void fill_unreached_experts(CausalLM& model, const std::string& checkpoint, CalibrationResult& r) {
  std::map<std::string, std::pair<float, std::string>> layer_max;  // layer prefix + projection -> (amax, module)
  std::vector<std::pair<std::string, ExpertName>> missing;
  for (const Linear* l : model.linears()) {
    const auto e = routed_expert(l->module);
    if (!e) continue;
    const std::string key = layer_projection(*e);
    if (auto it = r.amax.find(l->module); it != r.amax.end()) {
      auto& best = layer_max[key];
      if (best.second.empty() || it->second > best.first) best = {it->second, l->module};
    } else {
      missing.emplace_back(l->module, *e);
      r.expert_tokens.emplace(e->layer_prefix + e->expert, 0);
    }
  }
  for (const auto& [module, e] : missing) {
    auto it = layer_max.find(layer_projection(e));
    if (it == layer_max.end())
      throw_bad_input(fmt::format("{}: no calibration token reached any expert of {} ({} tokens); calibrate on more "
                                  "text",
                                  checkpoint, e.layer_prefix.substr(0, e.layer_prefix.size() - 1), r.tokens));
    r.amax[module] = it->second.first;
    r.unreached[module] = it->second.second;
  }
  std::map<std::string, std::pair<std::vector<double>, int>> layer_moments;
  for (const auto& [module, e] : missing) layer_moments.emplace(layer_projection(e), std::pair{std::vector<double>{}, 0});
  for (const auto& [module, m] : r.input_moments) {
    const auto e = routed_expert(module);
    if (!e) continue;
    auto it = layer_moments.find(layer_projection(*e));
    if (it == layer_moments.end()) continue;
    auto& [sum, n] = it->second;
    sum.resize(m.size(), 0.0);
    for (std::size_t c = 0; c < m.size(); ++c) sum[c] += m[c];
    ++n;
  }
  for (const auto& [module, e] : missing) {
    const auto& [sum, n] = layer_moments.at(layer_projection(e));
    std::vector<float>& m = r.input_moments[module];
    m.resize(sum.size());
    for (std::size_t c = 0; c < m.size(); ++c) m[c] = static_cast<float>(sum[c] / n);
  }
}

}  // namespace

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
  // Under mpirun each rank runs a contiguous share of the windows; rank 0 gets the result.
  dist::Ranks& ranks = dist::ranks();
  const auto share = dist::contiguous_share(static_cast<std::size_t>((r.tokens + context - 1) / context), ranks.rank(),
                                           ranks.size());
  auto sq = run_hooked(*model, toks, context, static_cast<std::int64_t>(share.first),
                       static_cast<std::int64_t>(share.last), r, on_progress);
  if (ranks.size() > 1 && !merge_on_rank_zero(ranks, r, sq)) return r;
  for (const auto& [module, s] : sq)
    if (s.rows > 0) r.input_moments[module] = s.means();
  fill_unreached_experts(*model, checkpoint, r);
  return r;
}

}  // namespace selq::calibration
