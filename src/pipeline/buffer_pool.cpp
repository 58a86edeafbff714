#include "pipeline/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

namespace selq::pipeline::detail {

namespace {
constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

constexpr std::size_t kPage = 4096;

// Capacity for a request: whole huge pages from 2 MiB up; below that whole
// pages, since a huge page for a small output would be zeroed and held in full
// (a shard of small tensors keeps dozens of them in flight).
std::size_t capacity_for(std::size_t size) {
  if (size == 0) size = 1;
  return size < kHugePage ? round_up(size, kPage) : round_up(size, kHugePage);
}

// An anonymous mapping of `capacity` bytes; from 2 MiB up aligned to 2 MiB,
// so that every 2 MiB of it can be one transparent huge page.
std::uint8_t* map_aligned(std::size_t capacity) {
  if (capacity < kHugePage) {
    void* m = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    return static_cast<std::uint8_t*>(m);
  }
  const std::size_t span = capacity + kHugePage;
  void* m = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  auto* base = static_cast<std::uint8_t*>(m);
  auto* aligned = reinterpret_cast<std::uint8_t*>(round_up(reinterpret_cast<std::uintptr_t>(base), kHugePage));
  const std::size_t head = static_cast<std::size_t>(aligned - base);
  if (head) ::munmap(base, head);
  if (span - head - capacity) ::munmap(aligned + capacity, span - head - capacity);
  // Advice only: without THP the buffer is ordinary pages, just as correct.
  (void)::madvise(aligned, capacity, MADV_HUGEPAGE);
  return aligned;
}
}  // namespace

Buffer::Buffer(std::size_t capacity) : capacity_(capacity_for(capacity)) {
  data_ = map_aligned(capacity_);
}

Buffer::~Buffer() {
  if (data_) ::munmap(data_, capacity_);
}

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      capacity_(std::exchange(o.capacity_, 0)),
      size_(std::exchange(o.size_, 0)),
      fresh_(std::exchange(o.fresh_, true)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, capacity_);
    data_ = std::exchange(o.data_, nullptr);
    capacity_ = std::exchange(o.capacity_, 0);
    size_ = std::exchange(o.size_, 0);
    fresh_ = std::exchange(o.fresh_, true);
  }
  return *this;
}

void Buffer::grow(std::size_t capacity) {
  const std::size_t cap = capacity_for(capacity);
  if (cap <= capacity_) return;
  void* to = nullptr;
  if (cap < kHugePage) {
    to = ::mremap(data_, capacity_, cap, MREMAP_MAYMOVE);
  } else {
    // Moved onto a 2 MiB boundary, so that its huge pages move whole.
    std::uint8_t* target = map_aligned(cap);
    to = ::mremap(data_, capacity_, cap, MREMAP_MAYMOVE | MREMAP_FIXED, target);
    if (to == MAP_FAILED) ::munmap(target, cap);
  }
  if (to == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::uint8_t*>(to);
  capacity_ = cap;
  if (cap >= kHugePage) (void)::madvise(data_, cap, MADV_HUGEPAGE);
}

void Buffer::reset(std::size_t size, bool zero) {
  size_ = size;
  if (!fresh_ && zero) std::memset(data_, 0, size);
  fresh_ = false;
}

Buffer BufferPool::acquire(std::size_t size) { return take(size, true); }

Buffer BufferPool::acquire_for_overwrite(std::size_t size) { return take(size, false); }

Buffer BufferPool::take(std::size_t size, bool zero) {
  Buffer out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // The smallest free buffer that fits; if none fits, drop the largest one
    // and map a bigger one, so the pool never holds more buffers than the
    // peak in use.
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const bool fits = it->capacity() >= size;
      if (best == free_.end() || (fits && (best->capacity() < size || it->capacity() < best->capacity())) ||
          (!fits && best->capacity() < size && it->capacity() > best->capacity()))
        best = it;
    }
    if (best != free_.end()) {
      out = std::move(*best);
      free_.erase(best);
    }
  }
  if (out.capacity() == 0)
    out = Buffer(size);
  else if (out.capacity() < size)
    out.grow(size);
  out.reset(size, zero);
  return out;
}

void BufferPool::prepare(std::vector<std::size_t> sizes) {
  // Largest first, each to the smallest free buffer that fits and is not
  // spoken for yet; the rest get new buffers.
  std::sort(sizes.rbegin(), sizes.rend());
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<bool> taken(free_.size(), false);
  std::vector<Buffer> added;
  for (const std::size_t size : sizes) {
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i)
      if (!taken[i] && free_[i].capacity() >= size && (best == free_.size() || free_[i].capacity() < free_[best].capacity()))
        best = i;
    if (best < free_.size())
      taken[best] = true;
    else
      added.emplace_back(size);
  }
  for (auto& b : added) free_.push_back(std::move(b));
}

void BufferPool::release(Buffer buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(std::move(buffer));
}

std::jthread BufferPool::unmap_in_background() {
  std::vector<Buffer> buffers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffers.swap(free_);
  }
  return std::jthread([b = std::move(buffers)]() mutable { b.clear(); });
}

std::size_t BufferPool::free_buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace selq::pipeline::detail
