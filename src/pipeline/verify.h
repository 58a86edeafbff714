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
  nlohmann::json report;  // everything, for --json (findings, engines, errors)
};

struct VerifyOptions {
  const io::Checkpoint* against{nullptr};  // source checkpoint for the error check
};

VerifyResult verify_checkpoint(const io::Checkpoint& ckpt, const VerifyOptions& options = {});

// "file: tensor: problem".
std::string format_finding(const VerifyFinding& f);

// Inverse of exporter::scheme_config_json: the dialect-adapted scheme whose
// config object equals `scheme_json`, or nullopt when selq has no such scheme.
std::optional<quant::SchemeSpec> scheme_from_config_json(exporter::Dialect d, const nlohmann::json& scheme_json,
                                                         DType model_dtype);
// The dialect-adapted scheme whose name() is `name` (manifest "scheme").
std::optional<quant::SchemeSpec> scheme_from_name(exporter::Dialect d, const std::string& name, DType model_dtype);

// Relative Frobenius error a scheme is expected to stay under on trained-like
// weights; a larger error means the tensor does not come from that source or
// was decoded wrongly.
double error_budget(const quant::SchemeSpec& spec);

}  // namespace selq::pipeline
