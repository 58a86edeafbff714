// Every scheme selq can write, and what error each is expected to keep under:
// facts about the schemes themselves, asked by whoever reads a checkpoint back
// (export/dialect_read) and by verify.
#include "quant/act_modes.h"
#include "quant/scheme_traits.h"

namespace selq::quant {

std::vector<SchemeSpec> writable_schemes() {
  std::vector<SchemeSpec> out;
  for (const ActModeTraits& act : all_act_mode_traits()) {
    auto add = [&](SchemeSpec s) {
      s.act = act.mode;
      out.push_back(s);
    };
    for (auto kind : {SchemeKind::MXFP4, SchemeKind::MXFP8})
      for (auto rule : {ScaleRule::Even, ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil}) {
        SchemeSpec s;
        s.kind = kind;
        s.scale_rule = rule;
        add(s);
      }
    for (auto kind : {SchemeKind::NVFP4, SchemeKind::FP8Tensor, SchemeKind::FP8Channel, SchemeKind::FP8Block}) {
      SchemeSpec s;
      s.kind = kind;
      add(s);
    }
    for (int bits : {4, 8})
      for (bool sym : {true, false}) {
        SchemeSpec s;
        s.kind = SchemeKind::IntChannel;
        s.bits = bits;
        s.symmetric = sym;
        add(s);
        s.kind = SchemeKind::IntGroup;
        for (int g : {32, 64, 128, 256}) {
          s.group_size = g;
          add(s);
        }
      }
    for (auto rule : {ScaleRule::Even, ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::RCeil}) {
      SchemeSpec s;
      s.kind = SchemeKind::FP8ChannelE8M0;
      s.scale_rule = rule;
      add(s);
    }
  }
  return out;
}

double error_budget(const SchemeSpec& spec) { return scheme_traits(spec.kind).error_budget(spec); }

}  // namespace selq::quant
