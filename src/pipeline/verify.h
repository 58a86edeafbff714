#pragma once
// `selq verify`: checks a quantized checkpoint the way its readers will see
// it. Structural (config vs tensors, manifest vs files), engine's-eye (every
// linear resolved by every engine of the dialect), numeric (scales, and with
// a source checkpoint the dequantized error per tensor).
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "export/dialect.h"
#include "io/checkpoint.h"
#include "quant/scheme.h"

namespace selq::pipeline {

struct VerifyFinding {
  std::string check;    // "manifest", "structure", "engine", "config", "numeric", "error-bound"
  std::string file;     // shard or config file the finding is about
  std::string tensor;   // tensor or module name (may be empty)
  std::string problem;
};

struct VerifyResult {
  std::vector<VerifyFinding> findings;
  // What is legal but worth knowing (a config entry that names no module of
  // this model, as generic presets carry): printed, never a failure.
  std::vector<VerifyFinding> notes;
  nlohmann::json report;  // everything, for --json (findings, engines, errors)
};

struct VerifyOptions {
  const io::Checkpoint* against{nullptr};  // source checkpoint for the error check
};

VerifyResult verify_checkpoint(const io::Checkpoint& ckpt, const VerifyOptions& options = {});

// "file: tensor: problem".
std::string format_finding(const VerifyFinding& f);


}  // namespace selq::pipeline
