#pragma once
// A checkpoint: one safetensors file, a directory of shards, or an index file.
// Resolves tensor names to shards and gives zero-copy views.
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace selq::io {

constexpr const char* kIndexName = "model.safetensors.index.json";

struct CheckpointTensor {
  TensorInfo info;
  std::string shard;  // file name relative to the checkpoint directory
};

class Checkpoint {
 public:
  // `path` is a .safetensors file, a directory, or a *.index.json file.
  static std::unique_ptr<Checkpoint> open(const std::string& path);

  const std::string& dir() const { return dir_; }
  // Shard file names (relative to dir) in their natural order.
  const std::vector<std::string>& shards() const { return shards_; }
  // All tensors, grouped by shard in shard order, in data-offset order within a shard.
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  const CheckpointTensor* find(const std::string& name) const;
  TensorView view(const std::string& name) const;
  const SafetensorsFile& shard_file(const std::string& shard) const;
  // config.json of the directory, or null if absent.
  const nlohmann::json& config() const { return config_; }
  // Files in dir that are not shards nor the index (tokenizer, code, ...).
  std::vector<std::string> other_files() const;
  bool has_index() const { return has_index_; }

 private:
  std::string dir_;
  bool has_index_{false};
  std::vector<std::string> shards_;
  std::vector<CheckpointTensor> tensors_;
  std::map<std::string, std::size_t> by_name_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  nlohmann::json config_;
};

// Parses an index.json, validating that every weight_map value stays inside
// `dir` (no absolute paths, no "..", no symlink escaping it).
std::map<std::string, std::string> read_index_weight_map(const std::string& index_path,
                                                         const std::string& dir);
// The in-memory part of read_index_weight_map: JSON shape and lexical path
// checks only (no filesystem access), so it can be fuzzed. Values must be
// non-empty relative paths without "." or ".." components.
std::map<std::string, std::string> parse_index_json(std::string_view json, const std::string& file);
// Writes an index atomically (temp + fsync + rename).
void write_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                 std::uint64_t total_size);

}  // namespace selq::io
