#pragma once
// The files written after the shards: index, config.json with the dialect's
// quantization_config, the source's non-tensor files, the manifest (exact
// tensor lists per format with hashes and error metrics) and the report.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/plan.h"

namespace selq::pipeline {

using io::kManifestName;
constexpr const char* kReportName = "selq-report.txt";
constexpr const char* kHtmlReportName = "selq-report.html";  // written by report/ (QuantizeOptions::before_commit)

struct TensorRecord {
  std::string source;
  std::uint64_t source_hash{0};               // XXH3-64 of the source bytes
  std::vector<std::uint64_t> output_hashes;   // one per planned output
  std::optional<quant::ErrorMetrics> metrics; // quantized tensors only
};

// A file-to-file run copies the source's non-tensor files; an in-place run
// leaves them where they are. The manifest records which it was.
enum class RunMode { FileToFile, InPlace };

// Writes everything but the shards into `dir` and returns the manifest (JSON
// text): the two functions below, in parallel.
std::string finalize_checkpoint(const io::Checkpoint& source, const Plan& plan, const recipe::Recipe& recipe,
                                const std::vector<TensorRecord>& records, const std::string& dir,
                                RunMode mode = RunMode::FileToFile);

// config.json with the dialect's quantization_config, the index, and (file
// to file) the source's non-tensor files. They depend on the plan alone.
void write_checkpoint_files(const io::Checkpoint& source, const Plan& plan, const std::string& dir, RunMode mode);

// The manifest and the report, which need the shards' tensor records.
// Returns the manifest (JSON text).
std::string write_manifest_and_report(const Plan& plan, const recipe::Recipe& recipe,
                                      const std::vector<TensorRecord>& records, const std::string& dir,
                                      RunMode mode);

// The manifest as JSON text: the exact tensor list per format, and per tensor
// its source, outputs (shard, dtype, shape), XXH3-64 hashes and error metrics.
std::string manifest_json(const Plan& plan, const recipe::Recipe& recipe, const std::vector<TensorRecord>& records,
                          RunMode mode);

std::string hash_hex(std::uint64_t h);

}  // namespace selq::pipeline
