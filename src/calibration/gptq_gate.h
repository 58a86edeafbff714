#pragma once
// The rounding gate of the gptq pass (docs/RECIPES.md, "Rounding"): GPTQ fits
// each linear's weights to the calibration rows it sees, and where it over-fits
// them (more inputs than rows, a domain the rows over-represent), rounding to
// nearest on the same scales (what `weighted` stores with the Hessian's
// diagonal) leaves less output error on rows it never saw. Every eighth
// calibration sequence is held out of the fit; for each linear both
// candidates' output error on those rows, E = Σ ‖(W − Q) x‖², is measured and
// the lower kept (a tie keeps GPTQ). Both are on one grid, so the stored
// format and scales do not depend on the choice.
#include <cstdint>
#include <span>
#include <vector>

namespace selq::calibration {

// Sequence s is held out of the fit when s % kGateHeldOutEvery == kGateHeldOutEvery - 1;
// with fewer than kGateHeldOutEvery sequences none is, and the gate does not run.
inline constexpr std::size_t kGateHeldOutEvery = 8;
inline bool gate_holds_out(std::size_t sequence, std::size_t sequences) {
  return sequences >= kGateHeldOutEvery && sequence % kGateHeldOutEvery == kGateHeldOutEvery - 1;
}

// Σₓ ‖(a − b) x‖² over the `rows` rows x of `x` ([rows, in] row-major), for
// a and b [out, in] row-major: the output error of b for a on those rows. In
// double, in fixed panels of output rows and chunks of input rows, so the value
// does not depend on the thread count. Read from the rows rather than their
// Hessian: a routed expert's few held-out rows cost rows·out·in, not out·in².
double output_error(std::span<const float> a, std::span<const float> b, std::int64_t out, std::int64_t in,
                    std::span<const float> x, std::int64_t rows);

struct GateChoice {
  bool gptq{true};            // false: the nearest rounding on GPTQ's scales was kept
  double gptq_error{0};       // output error on the held-out rows, relative to the
  double nearest_error{0};    //   output's energy Σₓ ‖w x‖² there
};

// Compares GPTQ's weights and the nearest rounding on the same grid for the
// original `w`, on the held-out rows `x` ([rows, in]).
GateChoice gate(std::span<const float> w, std::span<const float> gptq, std::span<const float> nearest,
                std::int64_t out, std::int64_t in, std::span<const float> x, std::int64_t rows);

}  // namespace selq::calibration
