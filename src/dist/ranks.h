#pragma once
// The ranks of a run: the processes mpirun or srun started (Open MPI), or the
// one process of a plain run. The pipeline and the planner ask only this of
// them, so they hold no MPI calls and build without MPI.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace selq::dist {

class Ranks {
 public:
  virtual ~Ranks() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Element-wise max over all ranks, in place (the same values on every rank).
  virtual void max_floats(std::span<float> values) = 0;
  // Element-wise sum over all ranks, in place (the same values on every rank);
  // wrapping past 2^64, so callers keep their sums far below it.
  virtual void sum_u64(std::span<std::uint64_t> values) = 0;
  // Every rank's text in rank order on rank 0; empty on the others.
  virtual std::vector<std::string> gather_text(const std::string& mine) = 0;
  // Rank 0's text on every rank.
  virtual std::string broadcast_text(const std::string& text) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job with `status`: after one rank fails, the
  // others would otherwise wait for it forever in the next exchange.
  [[noreturn]] virtual void abort(int status) = 0;
};

// Starts MPI when this process was launched by mpirun or srun (their
// environment says so) and selq was built with it; otherwise the process is
// the only rank and nothing is initialized (a plain run pays nothing).
void init(int& argc, char**& argv);
// The process's ranks (one, until init found a launcher).
Ranks& ranks();
inline bool distributed() { return ranks().size() > 1; }

// "rank 1 of 3: " when distributed, else empty: what a rank's error line starts with.
std::string rank_prefix();

namespace detail {
// Set by ranks_mpi.cpp when built with MPI; null otherwise.
std::unique_ptr<Ranks> make_mpi_ranks(int& argc, char**& argv);
bool launched_by_mpi();
}  // namespace detail

}  // namespace selq::dist
