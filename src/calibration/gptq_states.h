#pragma once
// The calibration sequences' hidden states between decoder layers in the gptq
// pass (calibration/gptq_pass.h), kept in two files of its work directory mapped
// read/write: one holds the input of the next layer, the other takes that
// layer's output; hidden.json, written atomically once the output is on disk,
// names which file holds the input after which layer. The states are page
// cache rather than anonymous memory, so beyond what RAM holds the kernel
// writes them to disk and reads them back (the spill), and a rerun resumes
// from them where they are. Their blocks are reserved up front, so a full
// disk is an error naming the file, never a fault on a later write.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace selq::calibration {

class LayerStates {
 public:
  // `lengths`: each sequence's tokens; `hidden_size` floats per token.
  LayerStates(std::string dir, std::string fingerprint, const std::vector<std::size_t>& lengths,
              std::int64_t hidden_size);
  ~LayerStates();
  LayerStates(const LayerStates&) = delete;
  LayerStates& operator=(const LayerStates&) = delete;

  // The last layer whose output a previous run with this fingerprint
  // committed (its states are now the input), or -1: then fill them with set().
  std::int64_t resume();
  // Sequence s's states before any layer (its embeddings).
  void set(std::size_t s, std::span<const float> states);
  // Every sequence's states at the input of the next layer.
  std::vector<std::span<const float>> inputs() const;
  // Runs every sequence through `layer`: `run(s, x)` updates a copy of
  // sequence s's states in place; the results go to the other file, which is
  // synced and committed as the output of `layer`.
  void advance(std::int64_t layer, const std::function<void(std::size_t s, float* x)>& run);

  static constexpr const char* kIndexFile = "hidden.json";

 private:
  struct Mapped {
    std::string path;
    float* data{nullptr};
    std::size_t bytes{0};
  };
  void map(Mapped& m, std::size_t index);
  std::span<float> sequence(const Mapped& m, std::size_t s) const;

  std::string dir_, fingerprint_;
  std::vector<std::size_t> offsets_;  // per sequence, in floats; one past the last at the end
  std::int64_t hidden_size_{0};
  Mapped files_[2];
  int input_{0};  // which file holds the input of the next layer
};

}  // namespace selq::calibration
