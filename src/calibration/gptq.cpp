#include "calibration/gptq.h"

#include <fmt/format.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "core/error.h"
#include "quant/gptq_grid.h"
#include "quant/rounding_traits.h"
#include "runtime/model/blas.h"
#include "runtime/model/linear.h"

namespace selq::calibration {

using namespace runtime;  // this room runs the runtime's models, matrices and text

namespace {

constexpr std::int64_t kPanelRows = 64;
constexpr int kFactorThreads = 2;  // OpenBLAS threads of the inverse's factorizations (fixed: see below)

// U with H⁻¹ = Uᵀ U (upper, row-major; only j >= i is read) from `a`, which
// holds J·H·J (H permuted, damped, its order reversed by J). With J H J = L Lᵀ,
// H = R Rᵀ for the upper R = J L J, so H⁻¹ = R⁻ᵀ R⁻¹ and U = R⁻¹ = J L⁻¹ J:
// one Cholesky and one triangular inverse (2n³/3 flops) where the paper's
// implementation takes a Cholesky, its inverse and a second Cholesky (4n³/3),
// on two OpenBLAS threads whatever the machine (a 7168-input expert's takes
// seconds; Gptq.InverseIsTheSameForAnyThreadCount). Row-major upper is
// column-major lower, LAPACK's 'L'.
bool inverse_cholesky_upper(std::vector<double>& a, std::int64_t n) {
  const int ni = static_cast<int>(n);
  {
    // Always kFactorThreads: OpenBLAS's threaded factorization rounds
    // differently for 1, 2 or 3 threads (measured), so a count that followed the
    // machine's cores would make the bytes depend on the machine.
    const blas::ThreadsForOneCall threads(kFactorThreads);
    if (blas::dpotrf_lower(ni, a.data(), ni) != 0) return false;
    if (blas::dtrtri_lower(ni, a.data(), ni) != 0) return false;
  }
  // L⁻¹[r][c] (r >= c) is at a[c][r]; U[i][j] = L⁻¹[n-1-i][n-1-j] goes to a[i][j]:
  // each upper element trades places with its mirror across the anti-diagonal.
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = i; j < n; ++j) {
      const std::int64_t k = i * n + j, mirror = (n - 1 - j) * n + (n - 1 - i);
      if (k < mirror) std::swap(a[static_cast<std::size_t>(k)], a[static_cast<std::size_t>(mirror)]);
    }
  return true;
}

// Static act-order: columns by decreasing Hessian diagonal (ties by index).
std::vector<std::int64_t> act_order(std::span<const double> hessian, std::int64_t n) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  const auto diag = [&](std::int64_t i) { return hessian[static_cast<std::size_t>(i * n + i)]; };
  std::stable_sort(perm.begin(), perm.end(), [&](std::int64_t a, std::int64_t b) { return diag(a) > diag(b); });
  return perm;
}

// The upper Cholesky factor of the inverse of the permuted Hessian (dead
// inputs' diagonal set to 1), dampened by `damp` times the mean diagonal;
// tenfold more dampening, up to three times, when it is not positive
// definite. Returns the dampening used.
double dampened_inverse(std::span<const double> hessian, std::int64_t n, const std::vector<std::int64_t>& perm,
                        const std::vector<char>& dead, double damp, const std::string& name, std::vector<double>& u) {
  double mean_diag = 0;
  for (std::int64_t i = 0; i < n; ++i)
    mean_diag += dead[static_cast<std::size_t>(i)] ? 1.0 : hessian[static_cast<std::size_t>(i * n + i)];
  mean_diag /= static_cast<double>(n);
  for (int attempt = 0;; ++attempt) {
    u.assign(static_cast<std::size_t>(n * n), 0.0);
    // J·H_perm·J: the permuted Hessian in reverse order (inverse_cholesky_upper).
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j)
        u[static_cast<std::size_t>(i * n + j)] = hessian[static_cast<std::size_t>(perm[n - 1 - i] * n + perm[n - 1 - j])];
    for (std::int64_t i = 0; i < n; ++i) {
      double& d = u[static_cast<std::size_t>(i * n + i)];
      if (dead[static_cast<std::size_t>(perm[n - 1 - i])]) d = 1.0;
      d += damp * mean_diag;
    }
    if (inverse_cholesky_upper(u, n)) return damp;
    if (attempt == 3)
      throw_bad_input(fmt::format("GPTQ: the Hessian of this linear's inputs is not positive definite even with "
                                  "dampening {} (are its calibration inputs finite?)",
                                  damp),
                      ErrorWhere{{}, name, {}});
    damp *= 10;
  }
}

// What one panel of rows is rounded with.
struct GptqColumns {
  const std::vector<std::int64_t>& perm;
  const std::vector<char>& dead;
  const std::vector<double>& u;
  const quant::ElementGrid& grid;
  std::int64_t n, block;
};

// Rows [r0, r0 + m) of w rounded column by column in act order, each
// rounding's error spread over the block's later columns, and a block's
// errors onto every later column at once; the grid values into `out`.
void round_panel(const Matrix& w, std::int64_t r0, std::int64_t m, const GptqColumns& g, float* out) {
  const std::int64_t n = g.n, block = g.block;
  std::vector<double> wp(static_cast<std::size_t>(m * n)), err(static_cast<std::size_t>(m * block));
  std::vector<float> row(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < m; ++r) {
    w.row_f32(r0 + r, row.data());
    for (std::int64_t j = 0; j < n; ++j)
      wp[static_cast<std::size_t>(r * n + j)] = g.dead[static_cast<std::size_t>(g.perm[j])] ? 0.0 : row[g.perm[j]];
  }
  for (std::int64_t i1 = 0; i1 < n; i1 += block) {
    const std::int64_t i2 = std::min(i1 + block, n), cnt = i2 - i1;
    for (std::int64_t c = i1; c < i2; ++c) {
      const double* uc = g.u.data() + c * n;
      const double d = uc[c];
      for (std::int64_t r = 0; r < m; ++r) {
        double* wr = wp.data() + r * n;
        const float q = g.grid.nearest(r0 + r, g.perm[c], static_cast<float>(wr[c]));
        out[static_cast<std::size_t>((r0 + r) * n + g.perm[c])] = q;
        const double e = (wr[c] - static_cast<double>(q)) / d;
        err[static_cast<std::size_t>(r * cnt + (c - i1))] = e;
        for (std::int64_t j = c + 1; j < i2; ++j) wr[j] -= e * uc[j];
      }
    }
    if (i2 < n)
      blas::dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n - i2),
                  static_cast<int>(cnt), -1.0, err.data(), static_cast<int>(cnt), g.u.data() + i1 * n + i2,
                  static_cast<int>(n), 1.0, wp.data() + i2, static_cast<int>(n));
  }
}

}  // namespace

std::vector<float> hessian_diagonal(std::span<const double> hessian, std::int64_t in) {
  std::vector<float> d(static_cast<std::size_t>(in));
  for (std::int64_t i = 0; i < in; ++i) d[static_cast<std::size_t>(i)] = static_cast<float>(std::max(0.0, hessian[static_cast<std::size_t>(i * in + i)]));
  return d;
}

GptqInverse gptq_inverse(std::span<const double> hessian, std::int64_t n, double dampening, const std::string& name) {
  GptqInverse inv;
  inv.perm = act_order(hessian, n);
  inv.dead.resize(static_cast<std::size_t>(n));  // inputs the calibration never saw: weights zeroed
  for (std::int64_t i = 0; i < n; ++i)
    inv.dead[static_cast<std::size_t>(i)] = hessian[static_cast<std::size_t>(i * n + i)] <= 0.0;
  inv.dampening = dampened_inverse(hessian, n, inv.perm, inv.dead, dampening, name, inv.u);
  return inv;
}

GptqResult gptq_round(const quant::SchemeSpec& spec, const TensorView& weight, std::span<const double> hessian,
                      const GptqOptions& options, const GptqInverse* inverse) {
  const std::string& name = weight.info->name;
  const Shape& shape = weight.info->shape;
  if (shape.size() != 2)
    throw_unsupported(fmt::format("rounding 'gptq' of a {}-D tensor is not implemented", shape.size()),
                      ErrorWhere{{}, name, {}});
  quant::check_rounding_supported(spec, name);
  const std::int64_t out = shape[0], n = shape[1];
  if (hessian.size() != static_cast<std::size_t>(n * n))
    throw Error(ErrorKind::Internal, fmt::format("gptq_round: Hessian of {} values for {} inputs", hessian.size(), n),
                ErrorWhere{{}, name, {}});
  // The scales: searched once on the original weight, then kept.
  quant::TensorQuantizeOptions search = options.quantize;
  const std::vector<float> diagonal = hessian_diagonal(hessian, n);
  if (options.scales_from_diagonal) search.channel_weights = diagonal;
  const auto scale_outs = quant::gptq_scale_outputs(spec, weight, search);
  const std::vector<std::span<const std::uint8_t>> scale_views(scale_outs.begin(), scale_outs.end());
  const quant::ElementGrid grid(spec, shape, scale_views);

  std::optional<GptqInverse> own;
  if (!inverse) own.emplace(gptq_inverse(hessian, n, options.dampening, name));
  const GptqInverse& inv = inverse ? *inverse : *own;
  if (inv.u.size() != static_cast<std::size_t>(n * n))
    throw Error(ErrorKind::Internal, fmt::format("gptq_round: an inverse of {} values for {} inputs", inv.u.size(), n),
                ErrorWhere{{}, name, {}});
  GptqResult result;
  result.dampening = inv.dampening;
  const Matrix w = load_matrix(weight, out, n);
  result.weight.assign(static_cast<std::size_t>(out * n), 0.0f);
  const GptqColumns cols{inv.perm, inv.dead, inv.u, grid, n, std::max<std::int64_t>(1, options.block_columns)};
  const std::int64_t panels = (out + kPanelRows - 1) / kPanelRows;
  tbb::parallel_for(std::int64_t{0}, panels, [&](std::int64_t p) {
    const std::int64_t r0 = p * kPanelRows;
    round_panel(w, r0, std::min(kPanelRows, out - r0), cols, result.weight.data());
  });
  if (options.with_nearest) {
    result.nearest.resize(result.weight.size());
    tbb::parallel_for(std::int64_t{0}, out, [&](std::int64_t r) {
      float* row = result.nearest.data() + r * n;
      w.row_f32(r, row);
      for (std::int64_t c = 0; c < n; ++c) row[c] = grid.nearest(r, c, row[c]);
    });
  }
  return result;
}

}  // namespace selq::calibration
