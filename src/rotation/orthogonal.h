#pragma once
// An n x n orthogonal matrix that no channel of a rotated vector can dominate:
//   Q = diag(s) * (H_p kron M) / sqrt(m p),  n = p * m,
// with p a power of two (Sylvester's Hadamard H_p, applied by the fast
// Walsh-Hadamard transform), M an m x m Hadamard matrix from Paley's
// constructions when one exists for m (12, 20, 28, 36, 44, ...), else a seeded
// random orthogonal matrix (scaled by sqrt(m) like a Hadamard), and s random
// signs from the seed. So 7168 = 28 x 256 and 1536 = 12 x 128 are Hadamard
// throughout, 576 = 16 x 36 too; an odd size with no Paley factor is not.
// Applying Q to a row costs O(n log p + n m), never O(n^2): M as one GEMM
// over a block of rows (OpenBLAS), H as a fast Walsh-Hadamard transform.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace selq::rotation {

class Orthogonal {
 public:
  // `block` > 0: the block-diagonal diag(s) (I kron H_block) / sqrt(block)
  // instead, mixing channels only within each run of `block` (an MX group's
  // 32: the micro-rotation of MR-GPTQ, which leaves other groups' outliers
  // where they were).
  Orthogonal(std::int64_t n, std::uint64_t seed, std::int64_t block = 0);

  std::int64_t size() const { return n_; }
  // Each of `rows` rows of x (rows x n, row-major) becomes x Q, or x Q^T.
  void apply_rows(float* x, std::int64_t rows, bool transpose) const;
  // Each row of x (rows x width, width a multiple of n) becomes, segment by
  // segment of n, segment Q (or Q^T): a block-diagonal Q, one per head.
  void apply_segments(float* x, std::int64_t rows, std::int64_t width, bool transpose) const;
  // W (n x cols, row-major) becomes Q^T W: each column times Q^T, as
  // segment Q applied to W's columns read as rows would give, without a transpose.
  void apply_columns(float* w, std::int64_t cols) const;
  // {"size", "construction": "hadamard(256) x paley2(28) with random signs", "seed"}: enough to rebuild it.
  nlohmann::json describe() const;
  // The dense matrix (tests and small sizes only).
  std::vector<double> dense() const;

 private:
  std::int64_t n_{0}, m_{1}, p_{1};
  std::uint64_t seed_{0};
  std::string small_kind_;     // "", "hadamard", "paley1", "paley2" or "random"
  bool blocks_only_{false};    // block-diagonal: no transform across blocks
  std::vector<float> small_;   // m x m, entries of magnitude ~1 (a Hadamard's are +-1)
  std::vector<float> signs_;   // n random signs times 1 / sqrt(n)
  void apply_block(float* x, std::int64_t rows, bool transpose, std::vector<float>& scratch) const;
};

// The m x m Hadamard matrix of Paley's construction I (m = q + 1, q a prime
// = 3 mod 4) or II (m = 2 (q + 1), q a prime = 1 mod 4), row-major +-1; empty
// when m is neither. Exposed for tests.
std::vector<float> paley_hadamard(std::int64_t m, std::string* kind = nullptr);

}  // namespace selq::rotation
