#include "dist/ranks.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::dist {

namespace {

// The one process of a plain run.
class SingleRank final : public Ranks {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void max_floats(std::span<float>) override {}
  void sum_u64(std::span<std::uint64_t>) override {}
  std::vector<std::string> gather_text(const std::string& mine) override { return {mine}; }
  std::string broadcast_text(const std::string& text) override { return text; }
  void barrier() override {}
  [[noreturn]] void abort(int status) override { std::exit(status); }
};

std::unique_ptr<Ranks>& current() {
  static std::unique_ptr<Ranks> r = std::make_unique<SingleRank>();
  return r;
}

}  // namespace

namespace detail {
bool launched_by_mpi() {
  // Open MPI's mpirun sets OMPI_COMM_WORLD_SIZE; srun with PMIx or PMI-2
  // sets PMIX_RANK or PMI_RANK (a plain srun of a non-MPI job sets neither).
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(v)) return true;
  return false;
}
}  // namespace detail

void init(int& argc, char**& argv) {
  if (!detail::launched_by_mpi()) return;
  if (auto r = detail::make_mpi_ranks(argc, argv)) {
    current() = std::move(r);
    return;
  }
  // Built without MPI: several copies would each do the whole run, into the same files.
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char* n = std::getenv(v); n && std::atoi(n) > 1)
      throw_unsupported(fmt::format("launched as one of {} ranks, but this selq was built without MPI "
                                    "(install libopenmpi-dev and rebuild, or run one process)",
                                    n));
}

Ranks& ranks() { return *current(); }

std::string rank_prefix() {
  return distributed() ? fmt::format("rank {} of {}: ", ranks().rank(), ranks().size()) : std::string();
}

}  // namespace selq::dist
