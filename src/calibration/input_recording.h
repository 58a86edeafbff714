#pragma once
// Every row a decoder layer's linears read, recorded once as the layer runs
// the calibration sequences, so that the gptq pass can round the layer's
// linears in batches (a Hessian budget) with each batch's Hessians summed from
// its own inputs' rows only: a batch of routed experts costs its experts'
// tokens, not another run of the whole layer (attention and every expert).
// The rows go to a file of the work directory, read back through a read-only
// mapping: page cache, which the kernel writes out beyond RAM, not anonymous
// memory. Each call's rows are kept as the layer made them and replayed in the
// same order, so the Hessians are the bits a hook during the run would sum.
// The gate's held-out sequences are recorded as a part of their own, and their
// rows read directly (calibration/gptq_gate.h), never summed into a Hessian.
// Under mpirun each rank records its own run of the sequences (a contiguous
// share, in order) into its own file of the shared work directory; share()
// then makes every rank read every rank's calls in rank order, which is the
// order one process makes them in, so the Hessians are the same bits.
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "dist/ranks.h"
#include "runtime/model/causal_lm.h"

namespace selq::calibration {

enum class RecordedPart { Fit = 0, HeldOut = 1 };

class InputRecording {
 public:
  // Records the inputs of `linears` (one record per input: the members of a
  // fused module read the same rows) into `path` (created; removed on destruction).
  InputRecording(std::string path, const std::vector<runtime::Linear*>& linears);
  ~InputRecording();
  InputRecording(const InputRecording&) = delete;
  InputRecording& operator=(const InputRecording&) = delete;

  // The part the next calls belong to.
  void set_part(RecordedPart part) { part_ = part; }
  // CausalLM::ActivationHook appending a call's rows when `l` is a recorded input's first reader.
  static void hook(void* ctx, const runtime::Linear& l, const float* x, std::int64_t rows);
  // Ends the recording: flushed and mapped for reading. IoError naming the file (a full disk) when it cannot be.
  void finish();
  // After finish(), on every rank: this rank's calls go to `path_of(rank)` + ".calls",
  // and the calls then read are every rank's (`path_of(k)`), in rank order. Keep
  // the recording until every rank is done reading (a barrier): its file goes with it.
  void share(dist::Ranks& ranks, const std::function<std::string(int rank)>& path_of);

  // Each recorded call of the input `l` reads in `part`, in the order the layer made them.
  void for_each_call(const runtime::Linear& l, RecordedPart part,
                     const std::function<void(const float* x, std::int64_t rows)>& fn) const;
  // The rows of the input `l` reads in `part`, summed over its calls.
  std::int64_t rows(const runtime::Linear& l, RecordedPart part) const;
  // Those rows as one [rows, l.in] array (the held-out rows the gate measures on).
  std::vector<float> gather(const runtime::Linear& l, RecordedPart part) const;
  std::uint64_t bytes() const { return written_; }

 private:
  struct Call {
    std::uint64_t offset;  // in bytes
    std::int64_t rows;
    std::size_t file{0};  // index into maps_: this rank's recording, or another rank's after share()
  };
  struct Mapping {
    const std::uint8_t* data{nullptr};
    std::uint64_t bytes{0};
  };
  const std::vector<Call>& calls(const runtime::Linear& l, RecordedPart part) const;

  std::string path_;
  int fd_{-1};
  std::map<const runtime::Linear*, std::size_t> slot_;  // first reader of each input
  std::map<std::string, std::size_t> of_input_;         // input key -> slot
  std::vector<std::int64_t> in_;                        // per slot: floats per row
  std::vector<std::vector<Call>> calls_[2];             // per part, per slot
  RecordedPart part_{RecordedPart::Fit};
  std::uint64_t written_{0};
  std::vector<Mapping> maps_;  // this rank's file first; after share(), every rank's in rank order
};

// The inputs of `linears` in `layer`, each sequence's hidden states (at the
// layer's input) run through it: `fit` first, then `held_out`.
void record_layer_inputs(runtime::CausalLM& model, std::int64_t layer, InputRecording& recording,
                         const std::vector<std::span<const float>>& fit,
                         const std::vector<std::span<const float>>& held_out, std::int64_t hidden_size);

}  // namespace selq::calibration
