#include "pipeline/remote_reader.h"

#include <algorithm>

#include "io/http_range.h"

namespace selq::pipeline::detail {

RemoteReader::RemoteReader(const io::Checkpoint& src, const std::vector<std::string>& order, std::size_t connections,
                           std::uint64_t window)
    : src_(src), window_(window) {
  for (const auto& name : order) {
    if (index_.count(name)) continue;
    index_.emplace(name, slots_.size());
    Slot s;
    s.name = name;
    s.range = src.remote_range(name);
    s.info = &src.find(name)->info;
    const std::size_t slot = slots_.size();
    const std::uint64_t length = s.range.length;
    s.chunks_left = std::max<std::uint64_t>(1, (length + kChunk - 1) / kChunk);  // an empty tensor is one empty chunk
    for (std::uint64_t k = 0; k < s.chunks_left; ++k)
      chunks_.push_back({slot, k * kChunk, std::min(kChunk, length - k * kChunk)});
    slots_.push_back(std::move(s));
  }
  std::uint64_t largest = 0;
  for (const auto& slot : slots_) largest = std::max(largest, slot.range.length);
  window_ = std::max(window_, 2 * largest);
  const std::size_t n = std::min(std::max<std::size_t>(connections, 1), chunks_.size());
  for (std::size_t k = 0; k < n; ++k) threads_.emplace_back([this] { download_loop(); });
}

RemoteReader::~RemoteReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cancel_ = true;
  cv_.notify_all();
  for (auto& t : threads_) t.join();
  slots_.clear();  // while mu_, which the buffers' deleters lock, still exists
}

void RemoteReader::download_loop() {
  for (;;) {
    Chunk c;
    std::span<std::uint8_t> dst;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // A chunk of a started tensor goes at once; the first chunk of the next
      // tensor waits for room in the window, unless a reader waits for it.
      cv_.wait(lock, [&] {
        if (stop_ || next_chunk_ == chunks_.size()) return true;
        const Chunk& n = chunks_[next_chunk_];
        return n.offset > 0 || held_ == 0 || n.slot < demanded_ || held_ + slots_[n.slot].range.length <= window_;
      });
      if (stop_ || next_chunk_ == chunks_.size()) return;
      c = chunks_[next_chunk_++];
      Slot& s = slots_[c.slot];
      if (c.offset == 0) {
        s.state = State::Downloading;
        held_ += s.range.length;
        next_ = c.slot + 1;
        try {
          s.filling = pool_.acquire_for_overwrite(s.range.length);
        } catch (...) {
          s.error = std::current_exception();
        }
      }
      if (!s.error) dst = s.filling.bytes().subspan(c.offset, c.length);
    }
    Slot& s = slots_[c.slot];  // slots_ never grows after construction
    std::exception_ptr error;
    if (!dst.empty()) {
      try {
        io::http_get_range_into(s.range.url, s.range.offset + c.offset, dst, s.name, nullptr, &cancel_);
      } catch (...) {
        error = std::current_exception();
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (error && !s.error) s.error = error;
      if (--s.chunks_left > 0) continue;
      if (s.error) {
        s.state = State::Failed;
        s.filling = Buffer();
        held_ -= s.range.length;
      } else {
        // The bytes count against the window until the buffer is back in the
        // pool: counted off at done(), the next download often came first,
        // found no free buffer and mapped (and the kernel zeroed) a new one.
        const std::uint64_t length = s.range.length;
        s.data = std::shared_ptr<Buffer>(new Buffer(std::move(s.filling)), [this, length](Buffer* p) {
          {
            std::lock_guard<std::mutex> l(mu_);
            pool_.release(std::move(*p));
            held_ -= length;
          }
          cv_.notify_all();
          delete p;
        });
        s.state = State::Ready;
      }
    }
    cv_.notify_all();
  }
}

io::FetchedTensor RemoteReader::view_of(const Slot& s) const {
  io::FetchedTensor f;
  f.view = TensorView{s.info, s.data->bytes()};
  f.owner = s.data;
  return f;
}

io::FetchedTensor RemoteReader::own_download(const std::string& tensor) {
  ++extra_;
  return src_.fetch(tensor);
}

io::FetchedTensor RemoteReader::fetch(const std::string& tensor) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto it = index_.find(tensor);
  if (it == index_.end()) {
    lock.unlock();
    return own_download(tensor);
  }
  const std::size_t i = it->second;
  Slot& s = slots_[i];
  if (s.state == State::Waiting) {
    // Not started: wait for it only if it is within the window of the
    // downloads in order (a fused group's members a few tensors on); one
    // further ahead (a member in a later shard) is downloaded here.
    std::uint64_t ahead = 0;
    for (std::size_t k = next_; k < i; ++k) ahead += slots_[k].range.length;
    if (ahead > window_) {
      lock.unlock();
      return own_download(tensor);
    }
    demanded_ = std::max(demanded_, i + 1);
    cv_.notify_all();
  }
  cv_.wait(lock, [&] { return s.state == State::Ready || s.state == State::Failed || s.state == State::Done; });
  if (s.state == State::Failed) std::rethrow_exception(s.error);
  if (s.state == State::Done) {  // read again after it was done with
    lock.unlock();
    return own_download(tensor);
  }
  return view_of(s);
}

void RemoteReader::done(const std::string& tensor) {
  std::shared_ptr<const Buffer> last;  // dropped unlocked: its deleter locks
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(tensor);
  if (it == index_.end()) return;
  Slot& s = slots_[it->second];
  // Waiting or downloading: the bytes read were a download of their own.
  if (s.state != State::Ready && s.state != State::Failed) return;
  s.state = State::Done;
  last = std::move(s.data);
}

}  // namespace selq::pipeline::detail
