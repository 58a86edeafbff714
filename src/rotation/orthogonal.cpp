#include "rotation/orthogonal.h"

#include <cmath>
#include <random>

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include "core/error.h"
#include "runtime/model/blas.h"

namespace selq::rotation {
namespace {

bool is_prime(std::int64_t q) {
  if (q < 2) return false;
  for (std::int64_t d = 2; d * d <= q; ++d)
    if (q % d == 0) return false;
  return true;
}

// Legendre symbol of a mod the prime q: 0, 1 or -1.
int chi(std::int64_t a, std::int64_t q) {
  a %= q;
  if (a < 0) a += q;
  if (a == 0) return 0;
  for (std::int64_t x = 1; x < q; ++x)
    if (x * x % q == a) return 1;
  return -1;
}

// The (q+1) x (q+1) matrix [[0, 1^T], [e 1, J]] with J[i][j] = chi(j - i) and
// e = -1 for q = 3 mod 4 (skew), +1 for q = 1 mod 4 (symmetric).
std::vector<int> paley_core(std::int64_t q) {
  const std::int64_t n = q + 1;
  const int e = q % 4 == 3 ? -1 : 1;
  std::vector<int> s(static_cast<std::size_t>(n * n), 0);
  for (std::int64_t j = 1; j < n; ++j) {
    s[static_cast<std::size_t>(j)] = 1;
    s[static_cast<std::size_t>(j * n)] = e;
  }
  for (std::int64_t i = 1; i < n; ++i)
    for (std::int64_t j = 1; j < n; ++j) s[static_cast<std::size_t>(i * n + j)] = chi(j - i, q);
  return s;
}

// In-place fast Walsh-Hadamard transform, unnormalized, across p (a power of
// two) vectors laid `stride` floats apart, on their elements [t0, t1).
void fwht_strided(float* x, std::int64_t p, std::int64_t stride, std::int64_t t0, std::int64_t t1) {
  for (std::int64_t h = 1; h < p; h *= 2)
    for (std::int64_t i = 0; i < p; i += 2 * h)
      for (std::int64_t j = i; j < i + h; ++j) {
        float* a = x + j * stride;
        float* b = x + (j + h) * stride;
        for (std::int64_t t = t0; t < t1; ++t) {
          const float u = a[t], v = b[t];
          a[t] = u + v;
          b[t] = u - v;
        }
      }
}

// A seeded m x m orthogonal matrix scaled by sqrt(m): Gram-Schmidt (twice,
// for orthogonality in float) of Gaussian rows, in double.
std::vector<float> random_orthogonal(std::int64_t m, std::uint64_t seed) {
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::normal_distribution<double> g;
  std::vector<double> a(static_cast<std::size_t>(m * m));
  for (auto& v : a) v = g(rng);
  for (std::int64_t i = 0; i < m; ++i) {
    double* r = &a[static_cast<std::size_t>(i * m)];
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t k = 0; k < i; ++k) {
        const double* o = &a[static_cast<std::size_t>(k * m)];
        double d = 0;
        for (std::int64_t j = 0; j < m; ++j) d += r[j] * o[j];
        for (std::int64_t j = 0; j < m; ++j) r[j] -= d * o[j];
      }
    double nn = 0;
    for (std::int64_t j = 0; j < m; ++j) nn += r[j] * r[j];
    const double inv = 1 / std::sqrt(nn);
    for (std::int64_t j = 0; j < m; ++j) r[j] *= inv;
  }
  std::vector<float> out(a.size());
  const double s = std::sqrt(static_cast<double>(m));
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = static_cast<float>(a[i] * s);
  return out;
}

}  // namespace

std::vector<float> paley_hadamard(std::int64_t m, std::string* kind) {
  if (m >= 4 && m % 4 == 0 && is_prime(m - 1) && (m - 1) % 4 == 3) {
    // I: H = S + I with S the skew core.
    const std::int64_t q = m - 1;
    const auto s = paley_core(q);
    std::vector<float> h(s.size());
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < m; ++j)
        h[static_cast<std::size_t>(i * m + j)] = static_cast<float>(s[static_cast<std::size_t>(i * m + j)] + (i == j));
    if (kind) *kind = "paley1";
    return h;
  }
  if (m >= 12 && m % 4 == 0 && is_prime(m / 2 - 1) && (m / 2 - 1) % 4 == 1) {
    // II: each entry of the symmetric core S becomes a 2 x 2 block,
    // 0 -> [[1, -1], [-1, -1]] and +-1 -> +-[[1, 1], [1, -1]].
    const std::int64_t q = m / 2 - 1, c = q + 1;
    const auto s = paley_core(q);
    std::vector<float> h(static_cast<std::size_t>(m * m));
    for (std::int64_t i = 0; i < c; ++i)
      for (std::int64_t j = 0; j < c; ++j) {
        const int v = s[static_cast<std::size_t>(i * c + j)];
        const float b[2][2] = {{v == 0 ? 1.f : float(v), v == 0 ? -1.f : float(v)},
                               {v == 0 ? -1.f : float(v), v == 0 ? -1.f : -float(v)}};
        for (int a = 0; a < 2; ++a)
          for (int d = 0; d < 2; ++d) h[static_cast<std::size_t>((2 * i + a) * m + 2 * j + d)] = b[a][d];
      }
    if (kind) *kind = "paley2";
    return h;
  }
  return {};
}

Orthogonal::Orthogonal(std::int64_t n, std::uint64_t seed, std::int64_t block) : n_(n), seed_(seed) {
  if (n < 1) throw_bad_input(fmt::format("a rotation needs a positive size, not {}", n));
  if (block > 0) {
    // Block-diagonal: M is a Hadamard of `block` (Sylvester, or Paley), H the identity.
    if (n % block != 0) throw_bad_input(fmt::format("a rotation block of {} does not divide {}", block, n));
    if ((block & (block - 1)) == 0) {
      small_.resize(static_cast<std::size_t>(block * block));
      for (std::int64_t i = 0; i < block; ++i)
        for (std::int64_t j = 0; j < block; ++j)
          small_[static_cast<std::size_t>(i * block + j)] = __builtin_popcountll(static_cast<unsigned long long>(i & j)) % 2 ? -1.f : 1.f;
      small_kind_ = "hadamard";
    } else {
      small_ = paley_hadamard(block, &small_kind_);
      if (small_.empty()) throw_bad_input(fmt::format("no Hadamard matrix of {} here (a power of two or a Paley size)", block));
    }
    m_ = block;
    p_ = n / block;
    blocks_only_ = true;
  } else {
    p_ = 1;
    while (n % (p_ * 2) == 0) p_ *= 2;
    m_ = n / p_;
    // Prefer a Paley factor that takes powers of two from p (36 x 16 over 9 x 64).
    if (m_ > 1) {
      for (std::int64_t k = 4; k <= p_; k *= 2) {
        std::string kind;
        auto h = paley_hadamard(m_ * k, &kind);
        if (!h.empty()) {
          small_ = std::move(h);
          small_kind_ = kind;
          m_ *= k;
          p_ /= k;
          break;
        }
      }
      if (small_.empty()) {
        small_ = random_orthogonal(m_, seed);
        small_kind_ = "random";
      }
    }
  }
  std::mt19937_64 rng(seed);
  signs_.resize(static_cast<std::size_t>(n));
  const float norm = static_cast<float>(1 / std::sqrt(static_cast<double>(blocks_only_ ? m_ : n)));
  for (auto& s : signs_) s = (rng() >> 63) ? -norm : norm;
}

// Row convention: y = x Q with Q = diag(s) (H kron M) / sqrt(n); the index
// of x is b * m + a (b over H's, a over M's), so a block of rows is a
// (rows p) x m matrix that M multiplies from the right in one GEMM, and H
// mixes rows m apart. Q^T = (H kron M^T) diag(s) / sqrt(n).
void Orthogonal::apply_block(float* x, std::int64_t rows, bool transpose, std::vector<float>& scratch) const {
  const std::size_t count = static_cast<std::size_t>(rows * n_);
  auto scale_by_signs = [&] {  // signs_ carry 1/sqrt(n) too
    for (std::int64_t r = 0; r < rows; ++r) {
      float* row = x + r * n_;
      for (std::int64_t i = 0; i < n_; ++i) row[i] *= signs_[static_cast<std::size_t>(i)];
    }
  };
  if (!transpose) scale_by_signs();
  if (m_ > 1) {
    scratch.resize(count);
    runtime::blas::sgemm(CblasRowMajor, CblasNoTrans, transpose ? CblasTrans : CblasNoTrans, static_cast<int>(rows * p_),
                         static_cast<int>(m_), static_cast<int>(m_), 1.f, x, static_cast<int>(m_), small_.data(),
                         static_cast<int>(m_), 0.f, scratch.data(), static_cast<int>(m_));
    std::copy(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(count), x);
  }
  if (p_ > 1 && !blocks_only_)
    for (std::int64_t r = 0; r < rows; ++r) fwht_strided(x + r * n_, p_, m_, 0, m_);
  if (transpose) scale_by_signs();
}

void Orthogonal::apply_rows(float* x, std::int64_t rows, bool transpose) const {
  apply_segments(x, rows, n_, transpose);
}

void Orthogonal::apply_segments(float* x, std::int64_t rows, std::int64_t width, bool transpose) const {
  if (width % n_ != 0)
    throw_bad_input(fmt::format("a width of {} is not a whole number of {}-wide rotation blocks", width, n_));
  // Segments of one row are rows of n as far as Q is concerned; ~64K floats a task.
  const std::int64_t segments = rows * (width / n_);
  const std::int64_t grain = std::max<std::int64_t>(1, 65536 / n_);
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, segments, grain), [&](const auto& r) {
    std::vector<float> scratch;
    for (std::int64_t k = r.begin(); k < r.end(); k += grain) {
      const std::int64_t take = std::min(grain, r.end() - k);
      apply_block(x + k * n_, take, transpose, scratch);
    }
  });
}

void Orthogonal::apply_columns(float* w, std::int64_t cols) const {
  // Q^T W = (H kron M^T) diag(s) W: rows times s, each run of m rows times M^T
  // (a GEMM per run), then H across the runs on whole rows: no transpose.
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n_, 16), [&](const auto& r) {
    for (std::int64_t i = r.begin(); i < r.end(); ++i) {
      float* row = w + i * cols;
      const float s = signs_[static_cast<std::size_t>(i)];
      for (std::int64_t j = 0; j < cols; ++j) row[j] *= s;
    }
  });
  if (m_ > 1)
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, p_), [&](const auto& r) {
      std::vector<float> scratch(static_cast<std::size_t>(m_ * cols));
      for (std::int64_t b = r.begin(); b < r.end(); ++b) {
        float* run = w + b * m_ * cols;
        runtime::blas::sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(m_), static_cast<int>(cols),
                             static_cast<int>(m_), 1.f, small_.data(), static_cast<int>(m_), run, static_cast<int>(cols),
                             0.f, scratch.data(), static_cast<int>(cols));
        std::copy(scratch.begin(), scratch.end(), run);
      }
    });
  if (p_ > 1 && !blocks_only_) {
    // Vector b is the run of m rows at b m cols; split its length over the cores.
    const std::int64_t len = m_ * cols;
    tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, len, 4096),
                      [&](const auto& r) { fwht_strided(w, p_, len, r.begin(), r.end()); });
  }
}

nlohmann::json Orthogonal::describe() const {
  if (blocks_only_)
    return {{"size", n_}, {"construction", fmt::format("block-diagonal {}({}) with random signs", small_kind_, m_)},
            {"seed", seed_}, {"block", m_}};
  std::string c;
  if (p_ > 1) c = fmt::format("hadamard({})", p_);
  if (m_ > 1) c += fmt::format("{}{}({})", c.empty() ? "" : " x ", small_kind_, m_);
  if (c.empty()) c = "identity(1)";
  return {{"size", n_}, {"construction", c + " with random signs"}, {"seed", seed_}};
}

std::vector<double> Orthogonal::dense() const {
  std::vector<float> eye(static_cast<std::size_t>(n_ * n_), 0.f);
  for (std::int64_t i = 0; i < n_; ++i) eye[static_cast<std::size_t>(i * n_ + i)] = 1.f;
  apply_rows(eye.data(), n_, false);  // row i of I Q is row i of Q
  return {eye.begin(), eye.end()};
}

}  // namespace selq::rotation
