#pragma once
// The float screen of the `mse` and `weighted` searches (rounding_mse.cpp):
// from each candidate's squared error summed in float, the candidate the
// double sums would choose, where the float sums can tell.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <limits>

namespace selq::quant::detail {

// Whether the searches screen (set_mse_screening; rounding_mse.cpp holds it).
extern std::atomic<bool> g_mse_screening;

// The first of lanes [first, first + n) with the least error.
// Inlined into each SIMD target's search (rounding_mse.cpp), which a call
// from this default-target code could not inline back.
template <class T>
[[gnu::always_inline]] inline int best_lane(const T* err, int first, int n) {
  int k = first;
  for (int j = first + 1; j < first + n; ++j)
    if (err[j] < err[k]) k = j;
  return k;
}

// The largest of a row's n channel weights (`weighted`): screened_lane's w_max.
inline float largest_weight(const float* w, std::size_t n) { return n ? *std::max_element(w, w + n) : 0.0f; }

// The lane of [first, first + n) whose double sum is least (the first on
// ties), told from the float sums f of `terms` terms each, or −1 when they
// cannot tell. A float sum is within c·f + slack of the double one:
// c = 2 (terms + 8) 2^-24 covers the rounding of x − dq, of its square and
// weight product, of magnitude weights formed in float (within 5 ulps of
// the ones the double sums take), of the float additions in any order
// (γ_terms), and the double sums' own (~terms·2^-53), while terms·2^-24 <=
// 1/2; slack = terms (w_max + 1) 2^-149, w_max bounding the weights, covers
// squares and products that underflow (each off by at most 2^-150 before
// the weight's product). So a float least that beats every other lane by
// more than both bounds is the double sums' least. A lane that is the same
// candidate as the float least (same(j, k)) has the same double sum and
// comes later, so it cannot be chosen.
template <class Same>
[[gnu::always_inline]] inline int screened_lane(const float* f, int first, int n, std::size_t terms, float w_max,
                                                Same&& same) {
  // Without branches on the data: which lane is least is a coin toss for
  // the branch predictor, and a miss costs as much as a block's sums.
  if (terms > (std::size_t{1} << 22)) return -1;
  float least = f[first];
  bool finite = true;
  for (int j = first; j < first + n; ++j) {
    least = std::min(least, f[j]);
    finite &= f[j] < std::numeric_limits<float>::infinity();  // false for NaN too
  }
  if (!finite) return -1;
  unsigned at_least = 0;
  for (int j = first; j < first + n; ++j) at_least |= static_cast<unsigned>(f[j] == least) << (j - first);
  const int k = first + std::countr_zero(at_least);
  const double c = 2.0 * (static_cast<double>(terms) + 8.0) * 0x1p-24;
  const double slack = static_cast<double>(terms) * (static_cast<double>(w_max) + 1.0) * 0x1p-149;
  const double fk = least;
  bool decided = true;
  for (int j = first; j < first + n; ++j) {
    const double fj = f[j];
    decided &= (j == k) | (fj - fk > c * (fj + fk) + 2.0 * slack) | same(j, k);
  }
  return decided ? k : -1;
}

}  // namespace selq::quant::detail
