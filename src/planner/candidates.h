#pragma once
// The formats the planner chooses between: a scheme with the activation mode
// engines run it with ("nvfp4-w4a16", "fp8-w8a8", ...), plus "bf16" (keep).
// The emitted recipe writes each spec with recipe::scheme_text, which parses
// back to the same spec, so a plan and its recipe cannot disagree.
#include <optional>
#include <string>
#include <vector>

#include "export/dialect.h"
#include "quant/scheme.h"

namespace selq::planner {

enum class Hardware { Any, Blackwell, Hopper, Mi355 };
// "blackwell", "hopper", "mi355", "any"; BadInput listing them otherwise.
Hardware parse_hardware(const std::string& name);
std::string hardware_name(Hardware h);

struct Candidate {
  std::string id;                         // "nvfp4-w4a16"
  std::optional<quant::SchemeSpec> spec;  // nullopt: keep the source float weights
  std::string description;                // one line for --help and the emitted recipe
  std::vector<Hardware> runs_on;          // hardware whose kernels run it (Any is implied)
  // Its activations take a static scale: quantizing it needs each module's
  // calibrated input amax (`selq calibrate`, passed as --calibration).
  bool calibrated() const;
  // Its rounding (weighted, gptq) needs calibration rows: the runtime tiers
  // score it (planner/unit_rounding.h), the data-free tier cannot.
  bool rounds_with_calibration() const;
};

// Every candidate selq knows, "bf16" first.
const std::vector<Candidate>& all_candidates();
// A known id, or one with a rounding suffix: "nvfp4-w4a16+mse" is that format
// with rounding `mse` (a dimension of the candidates: the tiers score the
// rounded weights and the emitted recipe's rule says `rounding: mse`; "+weighted"
// and "+gptq" need the runtime tiers). Null for an unknown id; BadInput for
// an unknown rounding or gptq of a format it does not round (FP8).
const Candidate* find_candidate(const std::string& id);

// The candidates named in `ids` (empty: every one), restricted to those `hw`
// runs and `dialect` can express; "bf16" is always included. BadInput names
// an unknown id.
std::vector<Candidate> select_candidates(const std::vector<std::string>& ids, Hardware hw,
                                         exporter::Dialect dialect);

}  // namespace selq::planner
