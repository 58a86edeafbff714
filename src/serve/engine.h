#pragma once
// The model behind `selq serve`: one thread owns the CausalLM and runs every
// admitted sequence in lockstep (continuous batching). Each step is one
// forward_steps call: prompts just admitted run whole (prefill) beside one
// token of each sequence already decoding, so a weight is read once per step
// for all of them; a finished sequence frees its slot for the next in the
// queue at once. Decoding is greedy: the same logits selq eval scores.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/model/causal_lm.h"
#include "runtime/text/tokenizer.h"

namespace selq::serve {

// One prompt's work and, when done, its answer.
struct Sequence {
  // In:
  std::vector<std::int32_t> prompt;
  std::int64_t max_tokens{16};
  std::vector<std::string> stop;        // strings that end the completion (not returned)
  std::set<std::int32_t> stop_ids;      // tokens that end it (end of sequence, end of turn)
  bool prompt_logprobs{false};          // logprobs of prompt tokens 1.. (echo)
  int top_logprobs{-1};                 // alternatives per token (-1: no logprobs)
  // Out:
  std::vector<std::int32_t> generated;  // the completion's tokens (a stop token or string left out)
  std::string text;                     // their text, cut before a stop string
  std::string finish_reason;            // "length" or "stop"
  // Per token with a logprob: the prompt's tokens 1.. (when asked), then the
  // completion's; each with its top alternatives (token, logprob) by rank.
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<std::int32_t, float>>> top;
};

// The sequences of one request, done together.
struct Work {
  std::vector<Sequence> sequences;
  std::promise<void> done;          // set when every sequence is finished (or the work failed)
  std::string error;                // why it failed, when it did
  std::atomic<bool> cancelled{false};  // the client is gone or timed out: drop it
  std::atomic<int> remaining{0};
};

// Work::error of what was queued when the server stopped.
inline constexpr const char* kShuttingDown = "the server is shutting down";

struct EngineOptions {
  int slots{16};                  // sequences decoded at once (at most the model's max_slots)
  std::size_t queue{256};         // sequences waiting beyond those: more is 503
  std::int64_t step_tokens{4096}; // prompt tokens admitted into one step (a longer prompt runs alone)
};

struct EngineStats {
  std::uint64_t steps{0}, prompt_tokens{0}, generated_tokens{0}, sequences{0};
  std::size_t queued{0}, running{0};
};

class Engine {
 public:
  Engine(std::unique_ptr<runtime::CausalLM> model, runtime::Tokenizer tokenizer, EngineOptions options);
  ~Engine();  // finishes what is running, fails what is queued
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues every sequence of `work`; false (nothing queued) when the queue
  // has no room for them all.
  bool submit(const std::shared_ptr<Work>& work);
  // Stops admitting; running sequences finish, queued ones fail.
  void shutdown();

  const runtime::Tokenizer& tokenizer() const { return tok_; }
  const runtime::CausalLM& model() const { return *model_; }
  EngineStats stats() const;

 private:
  struct Active {
    std::shared_ptr<Work> work;
    std::size_t index{0};
    int slot{0};
    bool prefilled{false};
  };
  Sequence& seq(const Active& a) { return a.work->sequences[a.index]; }
  void run();
  void admit(std::vector<Active>& active, std::vector<int>& free_slots);
  void step(std::vector<Active>& active);
  // Takes the step's logits of one sequence (its finish_reason set when done).
  void take(Active& a, std::vector<float>& logits);
  bool ends_in_stop(const Sequence& s) const;
  void finish(Active& a, std::vector<int>& free_slots);
  static void fail(const std::shared_ptr<Work>& w, const std::string& why);

  std::unique_ptr<runtime::CausalLM> model_;
  runtime::Tokenizer tok_;
  EngineOptions o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Work>, std::size_t>> queue_;
  bool stopping_{false};
  EngineStats stats_;
  std::thread thread_;
};

// The top k (token, logprob) of a log-softmaxed row, ties by the lower id.
std::vector<std::pair<std::int32_t, float>> top_k(const float* logp, std::int64_t n, int k);

}  // namespace selq::serve
