// The ranks of an Open MPI job (MPI_COMM_WORLD). libmpi is opened with dlopen
// only when mpirun or srun launched the process: linked, its dozen libraries
// cost every command 2-5 ms of start-up (docs/ARCHITECTURE.md "Optional
// libraries"). Built only with MPI (SELQ_WITH_MPI); without it a launched
// process runs as the only rank.
#include "dist/ranks.h"

#if SELQ_WITH_MPI
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <thread>

#include <fmt/format.h>
// The C API only: the deprecated C++ bindings do not build warning-free.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include "core/error.h"

#ifndef OPEN_MPI
#error "selq's MPI layer opens Open MPI's libmpi (its predefined handles are symbols of the library)"
#endif

namespace selq::dist::detail {

namespace {

// What selq calls, looked up once. Open MPI's predefined handles
// (MPI_COMM_WORLD, MPI_FLOAT, MPI_MAX...) are addresses of objects in libmpi.
struct Mpi {
  void* lib{nullptr};
  decltype(&MPI_Init_thread) init_thread{};
  decltype(&MPI_Finalize) finalize{};
  decltype(&MPI_Comm_rank) comm_rank{};
  decltype(&MPI_Comm_size) comm_size{};
  decltype(&MPI_Allreduce) allreduce{};
  decltype(&MPI_Gather) gather{};
  decltype(&MPI_Gatherv) gatherv{};
  decltype(&MPI_Bcast) bcast{};
  decltype(&MPI_Abort) abort{};
  decltype(&MPI_Ibarrier) ibarrier{};
  decltype(&MPI_Test) test{};
  MPI_Comm world{};
  MPI_Datatype f32{}, i32{}, u64{}, chars{};
  MPI_Op max{}, sum{};

  void* sym(const char* name) const {
    void* p = ::dlsym(lib, name);
    if (!p) throw_io(fmt::format("{} has no symbol {} (needed to run under mpirun)", SELQ_MPI_SONAME, name));
    return p;
  }
  template <class F>
  void fn(F& f, const char* name) const {
    f = reinterpret_cast<F>(sym(name));
  }

  Mpi() {
    // RTLD_GLOBAL: Open MPI's own components, which it opens in turn, look
    // up libmpi's symbols in the global scope.
    lib = ::dlopen(SELQ_MPI_SONAME, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
      const char* why = ::dlerror();
      throw_io(fmt::format("cannot load {} (needed to run under mpirun or srun): {}", SELQ_MPI_SONAME,
                           why ? why : "unknown error"));
    }
    fn(init_thread, "MPI_Init_thread");
    fn(finalize, "MPI_Finalize");
    fn(comm_rank, "MPI_Comm_rank");
    fn(comm_size, "MPI_Comm_size");
    fn(allreduce, "MPI_Allreduce");
    fn(gather, "MPI_Gather");
    fn(gatherv, "MPI_Gatherv");
    fn(bcast, "MPI_Bcast");
    fn(abort, "MPI_Abort");
    fn(ibarrier, "MPI_Ibarrier");
    fn(test, "MPI_Test");
    world = static_cast<MPI_Comm>(sym("ompi_mpi_comm_world"));
    f32 = static_cast<MPI_Datatype>(sym("ompi_mpi_float"));
    i32 = static_cast<MPI_Datatype>(sym("ompi_mpi_int"));
    u64 = static_cast<MPI_Datatype>(sym("ompi_mpi_unsigned_long_long"));
    chars = static_cast<MPI_Datatype>(sym("ompi_mpi_char"));
    max = static_cast<MPI_Op>(sym("ompi_mpi_op_max"));
    sum = static_cast<MPI_Op>(sym("ompi_mpi_op_sum"));
  }
};

Mpi& mpi() {
  static Mpi m;  // never closed: MPI_Finalize runs at exit
  return m;
}

class MpiRanks final : public Ranks {
 public:
  explicit MpiRanks(Mpi& m) : m_(m) {
    m_.comm_rank(m_.world, &rank_);
    m_.comm_size(m_.world, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void max_floats(std::span<float> v) override {
    wait_for_all();
    for_each_piece(v, [&](float* p, int n) { m_.allreduce(MPI_IN_PLACE, p, n, m_.f32, m_.max, m_.world); });
  }
  void sum_u64(std::span<std::uint64_t> v) override {
    wait_for_all();
    for_each_piece(v, [&](std::uint64_t* p, int n) { m_.allreduce(MPI_IN_PLACE, p, n, m_.u64, m_.sum, m_.world); });
  }
  std::vector<std::string> gather_text(const std::string& mine) override {
    int n = text_count(mine.size());
    wait_for_all();
    std::vector<int> sizes(rank_ == 0 ? size_ : 0), offsets(sizes.size());
    m_.gather(&n, 1, m_.i32, sizes.data(), 1, m_.i32, 0, m_.world);
    std::string all;
    if (rank_ == 0) {
      text_count(std::accumulate(sizes.begin(), sizes.end(), std::size_t{0}));  // the offsets are ints too
      std::exclusive_scan(sizes.begin(), sizes.end(), offsets.begin(), 0);
      all.resize(static_cast<std::size_t>(offsets.back() + sizes.back()));
    }
    m_.gatherv(mine.data(), n, m_.chars, all.data(), sizes.data(), offsets.data(), m_.chars, 0, m_.world);
    std::vector<std::string> out;
    for (std::size_t r = 0; r < sizes.size(); ++r)
      out.push_back(all.substr(static_cast<std::size_t>(offsets[r]), static_cast<std::size_t>(sizes[r])));
    return out;
  }
  std::string broadcast_text(const std::string& text) override {
    wait_for_all();
    unsigned long long n = text.size();
    m_.bcast(&n, 1, m_.u64, 0, m_.world);
    std::string out = rank_ == 0 ? text : std::string(n, '\0');
    m_.bcast(out.data(), text_count(n), m_.chars, 0, m_.world);
    return out;
  }
  void barrier() override { wait_for_all(); }
  [[noreturn]] void abort(int status) override {
    m_.abort(m_.world, status);
    std::exit(status);
  }

 private:
  // A text's length as MPI's int count; refused past it (texts are the small
  // exchanges: large ones go as numbers, in pieces).
  static int text_count(std::size_t bytes) {
    if (bytes > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw_unsupported(fmt::format("an exchange between ranks of {} bytes of text is beyond MPI's count (2 GiB)", bytes));
    return static_cast<int>(bytes);
  }

  // MPI counts are ints: a longer span goes in pieces of 2^27 elements.
  template <class T, class F>
  static void for_each_piece(std::span<T> v, F exchange) {
    constexpr std::size_t kPiece = std::size_t{1} << 27;
    for (std::size_t at = 0; at < v.size(); at += kPiece)
      exchange(v.data() + at, static_cast<int>(std::min(kPiece, v.size() - at)));
  }

  // Open MPI's blocking collectives spin while they wait: a rank done with
  // its shards then burnt a core that its peers' TBB workers on the same node
  // could use (on 2 cores, the rank that finished first used 3.7-4.1 CPU s for
  // 2.6 s of work on the 5.21 GB synthetic). Every exchange
  // starts with a barrier waited for asleep.
  void wait_for_all() {
    MPI_Request request{};
    m_.ibarrier(m_.world, &request);
    for (int done = 0;;) {
      m_.test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  Mpi& m_;
  int rank_{0}, size_{1};
};

}  // namespace

std::unique_ptr<Ranks> make_mpi_ranks(int& argc, char**& argv) {
  Mpi& m = mpi();
  // Every exchange is made by the main thread, between the TBB pipelines.
  int provided = 0;
  m.init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  std::atexit([] { mpi().finalize(); });
  return std::make_unique<MpiRanks>(m);
}

}  // namespace selq::dist::detail
#else
namespace selq::dist::detail {
std::unique_ptr<Ranks> make_mpi_ranks(int&, char**&) { return nullptr; }
}  // namespace selq::dist::detail
#endif
