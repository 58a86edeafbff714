// The drivers shared by the runtime's architectures (decoder_lm.h).
#include "runtime/model/decoder_lm.h"

#include <fmt/format.h>

#include "core/error.h"
#include "runtime/model/model_ops.h"

namespace selq::runtime {

void DecoderLM::load_ends(const io::Checkpoint& ck, const LinearLoader& loader, std::int64_t vocab,
                          std::int64_t hidden, bool tie_embeddings, const std::string& path,
                          const std::shared_ptr<const void>& mapping) {
  embed_ = load_matrix(ck.view("model.embed_tokens.weight"), vocab, hidden, mapping);
  final_norm_ = ops::load_vector(ck, "model.norm.weight", hidden);
  if (ck.find("lm_head.weight")) {
    head_ = load_matrix(ck.view("lm_head.weight"), vocab, hidden, mapping);
    head_stored_bits_ = loader.stored_bits("lm_head");
  } else if (!tie_embeddings) {
    throw_bad_input(fmt::format("{}: lm_head.weight missing and tie_word_embeddings is false", path));
  }
}

std::vector<float> DecoderLM::forward(std::span<const std::int32_t> tokens, bool all_logits) {
  if (tokens.empty()) return {};
  const SequenceStep step{0, tokens, all_logits};
  return std::move(forward_steps(std::span(&step, 1), false).front());
}

namespace {

// Sets the model's rowwise flag for one forward_steps call, and clears it
// whatever way the call ends.
class RowwiseScope {
 public:
  RowwiseScope(bool& flag, bool value) : flag_(flag) { flag_ = value; }
  ~RowwiseScope() { flag_ = false; }
  RowwiseScope(const RowwiseScope&) = delete;
  RowwiseScope& operator=(const RowwiseScope&) = delete;

 private:
  bool& flag_;
};

}  // namespace

std::vector<std::vector<float>> DecoderLM::forward_steps(std::span<const SequenceStep> steps, bool rowwise) {
  std::vector<Segment> segments;
  std::vector<std::int32_t> tokens;
  std::vector<bool> seen(cached_.size(), false);
  for (const SequenceStep& s : steps) {
    if (s.slot < 0 || static_cast<std::size_t>(s.slot) >= cached_.size() || seen[static_cast<std::size_t>(s.slot)])
      throw_bad_input(fmt::format("forward_steps: slot {} is not one of the {} slots, or is given twice", s.slot,
                                  cached_.size()));
    seen[static_cast<std::size_t>(s.slot)] = true;
    const auto T = static_cast<std::int64_t>(s.tokens.size()), pos0 = cached_[static_cast<std::size_t>(s.slot)];
    segments.push_back({s.slot, static_cast<std::int64_t>(tokens.size()), T, pos0});
    ensure_cache(s.slot, pos0 + T);
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
  }
  if (tokens.empty()) return std::vector<std::vector<float>>(steps.size());
  std::vector<float> x = embed(tokens);
  position_tables(segments);
  {
    RowwiseScope scope(rowwise_, rowwise);
    for (std::int64_t li = 0; li < layer_count(); ++li) run_layer(static_cast<std::size_t>(li), x.data(), segments);
  }
  for (const Segment& g : segments) cached_[static_cast<std::size_t>(g.slot)] += g.rows;
  return head_logits(x, steps, segments, rowwise);
}

std::vector<std::vector<float>> DecoderLM::head_logits(const std::vector<float>& x,
                                                       std::span<const SequenceStep> steps,
                                                       std::span<const Segment> segments, bool rowwise) {
  const std::int64_t H = hidden_size();
  std::vector<std::int64_t> rows;  // hidden-state row of each output row
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Segment& g = segments[i];
    for (std::int64_t t = steps[i].all_logits ? 0 : g.rows - 1; t >= 0 && t < g.rows; ++t) rows.push_back(g.row0 + t);
  }
  const auto out_rows = static_cast<std::int64_t>(rows.size());
  normed_.resize(static_cast<std::size_t>(out_rows * H));
  const float eps = final_norm_eps();
  ops::per_token(out_rows, [&](std::int64_t r) {
    ops::rms_norm(x.data() + rows[static_cast<std::size_t>(r)] * H, final_norm_.data(), H, eps, normed_.data() + r * H);
  });
  std::vector<float> all(static_cast<std::size_t>(out_rows * vocab()));
  // One row (decode, last-token logits): a GEMV that reads the head once.
  (rowwise ? matmul_rowwise : matmul)(head_.size() == 0 ? embed_ : head_, normed_.data(), out_rows, all.data());
  std::vector<std::vector<float>> logits(steps.size());
  std::int64_t r0 = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::int64_t n = steps[i].all_logits ? segments[i].rows : std::min<std::int64_t>(segments[i].rows, 1);
    logits[i].assign(all.begin() + r0 * vocab(), all.begin() + (r0 + n) * vocab());
    r0 += n;
  }
  return logits;
}

void DecoderLM::truncate(std::int64_t n, int slot) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= cached_.size())
    throw_bad_input(fmt::format("truncate: slot {} is not one of the {} slots", slot, cached_.size()));
  const std::int64_t have = cached(slot);
  if (n < 0 || n > have) throw_bad_input(fmt::format("truncate({}) with {} cached positions", n, have));
  cached_[static_cast<std::size_t>(slot)] = n;
}

void DecoderLM::reset_slots(int n) {
  if (n < 1 || n > max_slots())
    throw_bad_input(fmt::format("{} sequence slots asked, {} runs 1 to {} at once", n, model_type(), max_slots()));
  cached_.assign(static_cast<std::size_t>(n), 0);
}

const DecoderLM::Segment& DecoderLM::single(std::span<const Segment> segments) {
  if (segments.size() != 1)
    throw_bad_input(fmt::format("{} segments in one pass of an architecture that runs one sequence at a time",
                                segments.size()));
  return segments.front();
}

std::vector<float> DecoderLM::embed(std::span<const std::int32_t> tokens) {
  return ops::embed_tokens(embed_, vocab(), hidden_size(), tokens);
}

void DecoderLM::forward_layer(std::int64_t layer, float* hidden, std::int64_t n) {
  if (layer < 0 || layer >= layer_count()) throw_bad_input(fmt::format("layer {} of {}", layer, layer_count()));
  cached_.assign(1, 0);  // the cache now holds this sequence's keys for `layer` only
  ensure_cache(0, n);
  const Segment all{0, 0, n, 0};
  position_tables(std::span(&all, 1));
  run_layer(static_cast<std::size_t>(layer), hidden, std::span(&all, 1));
}

}  // namespace selq::runtime
