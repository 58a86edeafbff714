#pragma once
// Output buffers for quantized tensors, reused from one tensor to the next.
// A fresh buffer of tens of MB costs one page fault per 4 KiB page, the
// kernel's zeroing of each page and an munmap when freed: measured at about
// a seventh of a page-cached quantize run. Buffers here are anonymous
// mappings on transparent huge pages (one fault per 2 MiB) and go back to the
// pool, not to the kernel, so a run of thousands of tensors faults them once.
// Buffers under 2 MiB are ordinary pages. Bounded: the pool never holds more
// buffers than were in use at once (or prepared for the first tensors in
// flight, untouched until used), and none larger than the largest request
// (rounded up to 2 MiB, or to 4 KiB below that).
#include <cstdint>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace selq::pipeline::detail {

class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t capacity);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  std::size_t capacity() const { return capacity_; }
  std::span<std::uint8_t> bytes() const { return {data_, size_}; }
  // Sets the size (<= capacity) and zeroes those bytes unless the mapping is
  // fresh (the kernel hands out zeroed pages) or `zero` is false.
  void reset(std::size_t size, bool zero = true);
  // At least `capacity` bytes, keeping the pages already touched (mremap): a
  // buffer mapped anew is faulted and zeroed by the kernel as it fills, which
  // was half the CPU time of a remote run whose tensors came in 11 sizes.
  void grow(std::size_t capacity);

 private:
  std::uint8_t* data_{nullptr};
  std::size_t capacity_{0};
  std::size_t size_{0};
  bool fresh_{true};
};

class BufferPool {
 public:
  // `size` zeroed bytes: output never depends on what a buffer held before,
  // even if a kernel left a byte unwritten.
  Buffer acquire(std::size_t size);
  // `size` bytes of whatever the buffer held before: for a download, which
  // overwrites every byte (or fails, and the bytes are never used).
  Buffer acquire_for_overwrite(std::size_t size);
  void release(Buffer buffer);
  // Maps, untouched, the buffers that acquiring `sizes` would otherwise map,
  // before a shard's pipeline starts: mapping waits for the address-space lock
  // that populating source tensors holds (docs/BENCHMARKS.md, "Serial costs
  // and the address-space lock"). Unused pages cost no memory.
  void prepare(std::vector<std::size_t> sizes);
  // Buffers waiting for reuse (for tests of the bound).
  std::size_t free_buffers() const;
  // Hands every buffer waiting for reuse to a new thread that unmaps them
  // while the config and manifest are written; the thread is joined when the
  // returned handle is destroyed.
  std::jthread unmap_in_background();

 private:
  Buffer take(std::size_t size, bool zero);
  mutable std::mutex mu_;
  std::vector<Buffer> free_;
};

}  // namespace selq::pipeline::detail
