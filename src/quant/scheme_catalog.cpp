// Every scheme selq can write, and what error each is expected to keep under:
// facts about the schemes themselves, asked by whoever reads a checkpoint back
// (export/dialect_read) and by verify.
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"

namespace selq::quant {

std::vector<SchemeSpec> writable_schemes() {
  std::vector<SchemeSpec> variants;
  for (const SchemeTraits& t : all_scheme_traits()) t.writable_variants(variants);
  std::vector<SchemeSpec> out;
  out.reserve(variants.size() * kActModeCount);
  for (const ActModeTraits& act : all_act_mode_traits())
    for (SchemeSpec s : variants) {
      s.act = act.mode;
      out.push_back(s);
    }
  return out;
}

double error_budget(const SchemeSpec& spec) { return scheme_traits(spec.kind).error_budget(spec); }

}  // namespace selq::quant
