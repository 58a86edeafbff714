#include "cli/error_hint.h"

namespace selq::cli {

std::string hint_suffix(ErrorHint hint) {
  switch (hint) {
    case ErrorHint::None: return "";
    case ErrorHint::ReplaceOutput: return " (--force replaces it)";
    case ErrorHint::CalibrationFile: return ": run `selq calibrate SRC -o calib.json` and pass --calibration calib.json";
    case ErrorHint::TextFile: return "; or give a text: --text FILE (eval, demo), --calibration-text FILE (the others)";
    case ErrorHint::PromptsFile: return "; or give the prompts: --prompts FILE.jsonl";
    case ErrorHint::GgufFile: return "; or pass --gguf FILE";
    case ErrorHint::SourceCheckpoint: return "; pass --source DIR";
    case ErrorHint::AllowNonFinite: return " (--allow-non-finite quantizes it anyway)";
    case ErrorHint::Refine: return " (--refine N)";
    case ErrorHint::MemoryBudget: return " (--memory-budget)";
  }
  return "";
}

}  // namespace selq::cli
