#include "serve/engine.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "runtime/model/numerics.h"  // argmax and log_softmax, as selq eval computes them

namespace selq::serve {

namespace {

// Sets a work's promise once, whichever of its sequences or failures comes last.
void complete(Work& w) {
  try {
    w.done.set_value();
  } catch (const std::future_error&) {  // already set: failed earlier
  }
}

// The first stop string in text, cut there; whether one was found.
bool cut_at_stop(std::string& text, const std::vector<std::string>& stop) {
  std::size_t at = std::string::npos;
  for (const auto& s : stop) at = std::min(at, text.find(s));
  if (at == std::string::npos) return false;
  text.resize(at);
  return true;
}

}  // namespace

std::vector<std::pair<std::int32_t, float>> top_k(const float* logp, std::int64_t n, int k) {
  const auto kk = static_cast<std::int64_t>(std::min<std::int64_t>(std::max(k, 0), n));
  std::vector<std::int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](std::int32_t a, std::int32_t b) {
    return logp[a] > logp[b] || (logp[a] == logp[b] && a < b);
  });
  std::vector<std::pair<std::int32_t, float>> out;
  for (std::int64_t i = 0; i < kk; ++i) out.emplace_back(idx[static_cast<std::size_t>(i)], logp[idx[static_cast<std::size_t>(i)]]);
  return out;
}

Engine::Engine(std::unique_ptr<runtime::CausalLM> model, runtime::Tokenizer tokenizer, EngineOptions options)
    : model_(std::move(model)), tok_(std::move(tokenizer)), o_(options) {
  o_.slots = std::clamp(o_.slots, 1, model_->max_slots());
  model_->reset_slots(o_.slots);
  thread_ = std::thread([this] { run(); });
}

Engine::~Engine() {
  shutdown();
  if (thread_.joinable()) thread_.join();
}

void Engine::shutdown() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
}

bool Engine::submit(const std::shared_ptr<Work>& work) {
  {
    std::lock_guard lk(mu_);
    if (stopping_ || queue_.size() + work->sequences.size() > o_.queue) return false;
    work->remaining = static_cast<int>(work->sequences.size());
    for (std::size_t i = 0; i < work->sequences.size(); ++i) queue_.emplace_back(work, i);
    stats_.queued = queue_.size();
  }
  cv_.notify_all();
  return true;
}

EngineStats Engine::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void Engine::fail(const std::shared_ptr<Work>& w, const std::string& why) {
  if (!w->cancelled.exchange(true)) w->error = why;
  complete(*w);
}

void Engine::run() {
  std::vector<int> free_slots(static_cast<std::size_t>(o_.slots));
  std::iota(free_slots.rbegin(), free_slots.rend(), 0);
  std::vector<Active> active;
  for (;;) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty() || !active.empty(); });
      if (stopping_) {  // what is queued fails; what runs finishes
        for (auto& [w, i] : queue_) fail(w, kShuttingDown);
        queue_.clear();
        if (active.empty()) break;
      } else {
        admit(active, free_slots);
      }
      stats_.queued = queue_.size();
    }
    // A cancelled request (failed, timed out, client gone) gives its slots back.
    for (std::size_t i = 0; i < active.size();) {
      if (active[i].work->cancelled) {
        free_slots.push_back(active[i].slot);
        std::lock_guard lk(mu_);
        --stats_.running;  // before the answer goes out, so /health never lags it
        complete(*active[i].work);
        active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (active.empty()) continue;
    try {
      step(active);
      for (std::size_t i = 0; i < active.size();) {
        if (active[i].work->cancelled || !seq(active[i]).finish_reason.empty()) {
          finish(active[i], free_slots);
          active.erase(active.begin() + static_cast<std::ptrdiff_t>(i));
        } else {
          ++i;
        }
      }
    } catch (const std::exception& e) {  // the step itself failed: every sequence in it does
      std::lock_guard lk(mu_);
      stats_.running = 0;
      for (auto& a : active) {
        fail(a.work, fmt::format("the model failed: {}", e.what()));
        free_slots.push_back(a.slot);
      }
      active.clear();
    }
  }
}

// Under mu_: queued sequences into free slots, their prompts together at most
// step_tokens (a longer one alone).
void Engine::admit(std::vector<Active>& active, std::vector<int>& free_slots) {
  std::int64_t prompt_tokens = 0;
  while (!free_slots.empty() && !queue_.empty()) {
    auto& [w, i] = queue_.front();
    if (w->cancelled) {
      complete(*w);
      queue_.pop_front();
      continue;
    }
    const auto n = static_cast<std::int64_t>(w->sequences[i].prompt.size());
    if (prompt_tokens > 0 && prompt_tokens + n > o_.step_tokens) break;
    prompt_tokens += n;
    const int slot = free_slots.back();
    free_slots.pop_back();
    model_->truncate(0, slot);  // the slot's previous sequence
    active.push_back({w, i, slot, false});
    ++stats_.running;
    queue_.pop_front();
  }
}

void Engine::step(std::vector<Active>& active) {
  std::vector<runtime::CausalLM::SequenceStep> steps;
  steps.reserve(active.size());
  for (const Active& a : active) {
    const Sequence& s = seq(a);
    if (!a.prefilled)
      steps.push_back({a.slot, std::span<const std::int32_t>(s.prompt), s.prompt_logprobs});
    else
      steps.push_back({a.slot, std::span<const std::int32_t>(&s.generated.back(), 1), false});
  }
  auto logits = model_->forward_steps(steps, /*rowwise=*/false);
  std::uint64_t prompt = 0, generated = 0;
  for (std::size_t i = 0; i < active.size(); ++i) {
    const Sequence& s = seq(active[i]);
    if (!active[i].prefilled) prompt += s.prompt.size();
    const std::size_t before = s.generated.size();
    take(active[i], logits[i]);
    generated += s.generated.size() - before;
  }
  std::lock_guard lk(mu_);
  ++stats_.steps;
  stats_.prompt_tokens += prompt;
  stats_.generated_tokens += generated;
}

void Engine::take(Active& a, std::vector<float>& logits) {
  Sequence& s = seq(a);
  const std::int64_t V = model_->vocab();
  const std::int64_t rows = static_cast<std::int64_t>(logits.size()) / V;
  float* last = logits.data() + (rows - 1) * V;
  if (!a.prefilled) {
    a.prefilled = true;
    if (s.prompt_logprobs)  // row r predicts prompt token r + 1
      for (std::int64_t r = 0; r + 1 < rows; ++r) {
        float* row = logits.data() + r * V;
        runtime::log_softmax_inplace(row, V);
        s.logprobs.push_back(row[s.prompt[static_cast<std::size_t>(r + 1)]]);
        s.top.push_back(top_k(row, V, s.top_logprobs));
      }
    if (s.max_tokens == 0) {
      s.finish_reason = "length";
      return;
    }
  }
  const std::int32_t next = runtime::argmax(last, V);
  if (s.top_logprobs >= 0) {
    runtime::log_softmax_inplace(last, V);
    s.logprobs.push_back(last[next]);
    s.top.push_back(top_k(last, V, s.top_logprobs));
  }
  s.generated.push_back(next);
  // The text is the completion's up to a stop token (left out, its logprob kept:
  // echo's token_logprobs keep one entry per token) or a stop string (cut).
  if (s.stop_ids.count(next)) {
    s.text = tok_.decode(std::span<const std::int32_t>(s.generated.data(), s.generated.size() - 1));
    s.finish_reason = "stop";
    return;
  }
  const bool at_length = static_cast<std::int64_t>(s.generated.size()) >= s.max_tokens;
  if (at_length || ends_in_stop(s)) {
    std::string text = tok_.decode(s.generated);
    s.finish_reason = cut_at_stop(text, s.stop) ? "stop" : "length";
    s.text = std::move(text);
  }
}

// Whether a stop string ends in the newest token: only the last tokens are
// decoded (a stop string of n bytes spans at most n + 1 of them, a partial
// character's bytes included), not the whole completion at every step.
bool Engine::ends_in_stop(const Sequence& s) const {
  std::size_t longest = 0;
  for (const auto& t : s.stop) longest = std::max(longest, t.size());
  if (longest == 0) return false;
  const std::size_t n = std::min(s.generated.size(), longest + 1);
  std::string tail = tok_.decode(std::span<const std::int32_t>(s.generated.data() + s.generated.size() - n, n));
  return cut_at_stop(tail, s.stop);
}

void Engine::finish(Active& a, std::vector<int>& free_slots) {
  free_slots.push_back(a.slot);
  std::lock_guard lk(mu_);
  ++stats_.sequences;
  --stats_.running;  // before the answer goes out, so /health never lags it
  if (--a.work->remaining == 0) complete(*a.work);
}

}  // namespace selq::serve
