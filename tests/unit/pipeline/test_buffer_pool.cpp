// The quantize output buffers: reused (same memory), always handed out
// zeroed, never more of them than were in use at once, and unmapped off the
// calling thread at the end of a run.
#include <sys/mman.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "pipeline/buffer_pool.h"

namespace selq::pipeline::detail {
namespace {

bool all_zero(std::span<const std::uint8_t> b) {
  return std::all_of(b.begin(), b.end(), [](std::uint8_t v) { return v == 0; });
}

TEST(BufferPool, ReusedBufferIsTheSameMemoryAndComesBackZeroed) {
  BufferPool pool;
  Buffer a = pool.acquire(5 << 20);
  ASSERT_EQ(a.bytes().size(), std::size_t{5} << 20);
  EXPECT_TRUE(all_zero(a.bytes()));
  std::memset(a.bytes().data(), 0xAB, a.bytes().size());
  const std::uint8_t* where = a.bytes().data();
  pool.release(std::move(a));
  EXPECT_EQ(pool.free_buffers(), 1u);

  Buffer b = pool.acquire(1 << 20);
  EXPECT_EQ(b.bytes().data(), where);  // reused, not mapped again
  EXPECT_EQ(b.bytes().size(), std::size_t{1} << 20);
  EXPECT_TRUE(all_zero(b.bytes()));
  EXPECT_EQ(pool.free_buffers(), 0u);
}

TEST(BufferPool, PicksTheSmallestThatFits) {
  BufferPool pool;
  Buffer big = pool.acquire(9 << 20), mid = pool.acquire(5 << 20), small = pool.acquire(1 << 20);
  const std::uint8_t* mid_at = mid.bytes().data();
  pool.release(std::move(big));
  pool.release(std::move(small));
  pool.release(std::move(mid));
  Buffer got = pool.acquire(4 << 20);
  EXPECT_EQ(got.bytes().data(), mid_at);
}

TEST(BufferPool, NeverHoldsMoreBuffersThanThePeakInUse) {
  BufferPool pool;
  {
    Buffer a = pool.acquire(1 << 20), b = pool.acquire(2 << 20), c = pool.acquire(3 << 20);
    pool.release(std::move(a));
    pool.release(std::move(b));
    pool.release(std::move(c));
  }
  ASSERT_EQ(pool.free_buffers(), 3u);
  // Requests larger than every free buffer replace one rather than add one.
  for (std::size_t mib : {8, 16, 24}) {
    Buffer x = pool.acquire(mib << 20);
    EXPECT_EQ(x.bytes().size(), mib << 20);
    EXPECT_TRUE(all_zero(x.bytes()));
    EXPECT_EQ(pool.free_buffers(), 2u);
    pool.release(std::move(x));
    EXPECT_EQ(pool.free_buffers(), 3u);
  }
}

// A request larger than every free buffer grows one in place of mapping a
// new one: the pages it had are kept (with their bytes), so only the added
// pages are faulted and zeroed by the kernel.
TEST(BufferPool, GrowingKeepsTheTouchedPages) {
  BufferPool pool;
  Buffer a = pool.acquire(4 << 20);
  std::memset(a.bytes().data(), 0xAB, a.bytes().size());
  pool.release(std::move(a));
  Buffer b = pool.acquire_for_overwrite(std::size_t{12} << 20);
  ASSERT_EQ(b.bytes().size(), std::size_t{12} << 20);
  EXPECT_TRUE(std::all_of(b.bytes().begin(), b.bytes().begin() + (4 << 20), [](std::uint8_t v) { return v == 0xAB; }));
  EXPECT_TRUE(all_zero(b.bytes().subspan(4 << 20)));  // the new pages, fresh from the kernel
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.bytes().data()) % (2 << 20), 0u);  // still on a huge-page boundary
  std::memset(b.bytes().data(), 0xCD, b.bytes().size());
  pool.release(std::move(b));
  Buffer c = pool.acquire(std::size_t{12} << 20);  // acquire still zeroes
  EXPECT_TRUE(all_zero(c.bytes()));
}

TEST(BufferPool, SmallBuffersAreNotRoundedUpToAHugePage) {
  BufferPool pool;
  Buffer s = pool.acquire(100 << 10);
  EXPECT_EQ(s.capacity(), std::size_t{100} << 10);  // whole 4 KiB pages
  Buffer t = pool.acquire((100 << 10) + 1);
  EXPECT_EQ(t.capacity(), (std::size_t{100} << 10) + 4096);
  Buffer h = pool.acquire((2 << 20) + 1);
  EXPECT_EQ(h.capacity(), std::size_t{4} << 20);  // huge pages from 2 MiB up
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(h.bytes().data()) % (2 << 20), 0u);
}

// Whether `p` lies in a mapping of this process (msync fails with ENOMEM on
// an unmapped page).
bool mapped(const void* p) {
  const auto page = reinterpret_cast<std::uintptr_t>(p) & ~std::uintptr_t{4095};
  return ::msync(reinterpret_cast<void*>(page), 4096, MS_ASYNC) == 0;
}

TEST(BufferPool, UnmapsItsBuffersOnAnotherThread) {
  BufferPool pool;
  Buffer a = pool.acquire(3 << 20), b = pool.acquire(1 << 20), kept = pool.acquire(1 << 20);
  const std::uint8_t *a_at = a.bytes().data(), *b_at = b.bytes().data();
  pool.release(std::move(a));
  pool.release(std::move(b));
  ASSERT_TRUE(mapped(a_at) && mapped(b_at));
  {
    const std::jthread unmapping = pool.unmap_in_background();
    EXPECT_EQ(pool.free_buffers(), 0u);  // taken at once
  }  // joined here
  EXPECT_FALSE(mapped(a_at));
  EXPECT_FALSE(mapped(b_at));
  // A buffer in use is not the pool's and stays; the pool works on.
  EXPECT_TRUE(mapped(kept.bytes().data()));
  Buffer c = pool.acquire(2 << 20);
  EXPECT_TRUE(all_zero(c.bytes()));
}

TEST(BufferPool, PreparedBuffersServeTheFirstRequestsWithoutMappingMore) {
  BufferPool pool;
  Buffer kept = pool.acquire(8192);
  pool.release(std::move(kept));  // one free buffer already fits the 5000-byte request
  pool.prepare({100, 5000, 3 * 4096});
  EXPECT_EQ(pool.free_buffers(), 3u);  // two mapped, one reused
  pool.prepare({3 * 4096, 100});       // covered already: nothing new
  EXPECT_EQ(pool.free_buffers(), 3u);
  std::vector<Buffer> in_use;
  std::set<const std::uint8_t*> where;
  for (std::size_t size : {std::size_t{3 * 4096}, std::size_t{5000}, std::size_t{100}}) {
    in_use.push_back(pool.acquire(size));
    EXPECT_EQ(in_use.back().bytes().size(), size);
    EXPECT_TRUE(all_zero(in_use.back().bytes()));
    where.insert(in_use.back().bytes().data());
  }
  EXPECT_EQ(pool.free_buffers(), 0u);  // all three came from the pool
  EXPECT_EQ(where.size(), 3u);
}

TEST(BufferPool, EmptyRequestsWork) {
  BufferPool pool;
  Buffer z = pool.acquire(0);
  EXPECT_TRUE(z.bytes().empty());
  pool.release(std::move(z));
  Buffer y = pool.acquire(100);
  EXPECT_EQ(y.bytes().size(), 100u);
  EXPECT_TRUE(all_zero(y.bytes()));
}

}  // namespace
}  // namespace selq::pipeline::detail
