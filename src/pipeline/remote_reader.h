#pragma once
// Downloads a remote checkpoint's tensors ahead of the pipeline, so that the
// network stays busy while the workers compute: `connections` threads, one
// keep-alive connection each, download the tensors in the order the shards
// take them, each in ranges of kChunk bytes on all connections at once, into
// reused buffers (no page faulting of fresh ones), up to a window of bytes
// ahead; a tensor's readers (an NVFP4 fused member is read for its group's
// amax and again to quantize) share one copy.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint.h"
#include "pipeline/buffer_pool.h"

namespace selq::pipeline::detail {

class RemoteReader {
 public:
  // `order`: the tensors this process will read, in the order it reads them
  // (a name may repeat; only its first place counts). `window`: bytes that
  // may be downloaded and not yet done with, at least twice the largest
  // tensor (one being quantized, the next downloading); a tensor a reader
  // waits for always starts.
  RemoteReader(const io::Checkpoint& src, const std::vector<std::string>& order, std::size_t connections,
               std::uint64_t window);
  // Stops the downloads in flight and joins the threads.
  ~RemoteReader();
  RemoteReader(const RemoteReader&) = delete;
  RemoteReader& operator=(const RemoteReader&) = delete;

  // The tensor's bytes: the prefetched copy (waiting for it), or, for a
  // tensor not in `order`, already done with, or further ahead than the
  // window, a download of its own. Thread-safe; a failed download rethrows.
  io::FetchedTensor fetch(const std::string& tensor);
  // The pipeline will not read the tensor again (from its prefetched copy):
  // its bytes go back to the pool once the last holder drops them.
  void done(const std::string& tensor);
  // Tensors downloaded outside the prefetch order (for tests and reports).
  std::uint64_t extra_downloads() const { return extra_.load(); }

 private:
  // One range request. 16 MiB: a 0.26 GB tensor keeps every connection busy,
  // and a request's own cost (a round trip, headers) stays under 0.1%.
  static constexpr std::uint64_t kChunk = std::uint64_t{16} << 20;
  enum class State { Waiting, Downloading, Ready, Failed, Done };
  struct Slot {
    std::string name;
    io::RemoteRange range;
    const TensorInfo* info{nullptr};
    State state{State::Waiting};
    Buffer filling;             // while downloading
    std::size_t chunks_left{0};
    std::shared_ptr<const Buffer> data;
    std::exception_ptr error;
  };
  struct Chunk {
    std::size_t slot{0};
    std::uint64_t offset{0}, length{0};  // within the tensor
  };
  void download_loop();
  io::FetchedTensor own_download(const std::string& tensor);
  io::FetchedTensor view_of(const Slot& s) const;

  const io::Checkpoint& src_;
  std::uint64_t window_;
  BufferPool pool_;  // before slots_: their buffers go back to it
  std::vector<Slot> slots_;
  std::vector<Chunk> chunks_;  // in download order
  std::map<std::string, std::size_t> index_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t next_chunk_{0};
  std::size_t next_{0};      // the next slot to start
  std::size_t demanded_{0};  // slots below this start whatever the window: a reader waits on one
  std::uint64_t held_{0};    // bytes of slots started and not done
  bool stop_{false};
  std::atomic<bool> cancel_{false};
  std::atomic<std::uint64_t> extra_{0};
  std::vector<std::thread> threads_;
};

}  // namespace selq::pipeline::detail
