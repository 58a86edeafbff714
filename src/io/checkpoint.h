#pragma once
// A checkpoint: one safetensors file, a directory of shards, or an index file,
// local or at an http(s) URL. Resolves tensor names to shards and gives
// zero-copy views (local) or range-downloaded bytes (remote).
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace selq::io {

constexpr const char* kIndexName = "model.safetensors.index.json";
// What selq wrote, tensor by tensor (pipeline/manifest.h writes it).
constexpr const char* kManifestName = "selq-manifest.json";

struct CheckpointTensor {
  TensorInfo info;
  std::string shard;  // file name relative to the checkpoint directory
};

// Bytes of one tensor. `view` points into the source mapping (local, empty
// storage) or into `storage` or `owner` (remote download); moving keeps it
// valid (a moved vector keeps its buffer), copying would not, hence move-only.
struct FetchedTensor {
  FetchedTensor() = default;
  FetchedTensor(FetchedTensor&&) = default;
  FetchedTensor& operator=(FetchedTensor&&) = default;
  FetchedTensor(const FetchedTensor&) = delete;
  FetchedTensor& operator=(const FetchedTensor&) = delete;
  TensorView view;
  std::vector<std::uint8_t> storage;
  // Downloaded bytes held elsewhere (a pooled buffer shared by the readers
  // of one tensor), freed or returned when the last holder lets go.
  std::shared_ptr<const void> owner;
};

// Where a remote tensor's bytes are: `length` bytes from `offset` of `url`.
struct RemoteRange {
  std::string url;
  std::uint64_t offset{0};
  std::uint64_t length{0};
};

// A shard read over HTTP: only its header is kept.
struct RemoteShard {
  std::string url;
  std::uint64_t size{0};
  std::uint64_t data_start{0};
  ParsedHeader header;
  std::map<std::string, std::size_t> index;
};

class Checkpoint {
 public:
  // `path` is a .safetensors file, a directory, or a *.index.json file, or
  // the http(s) URL of one of them. A remote directory URL is resolved to
  // URL/model.safetensors.index.json, else URL/model.safetensors (HTTP has no
  // directory listing); only shard headers are downloaded here.
  static std::unique_ptr<Checkpoint> open(const std::string& path);

  const std::string& dir() const { return dir_; }
  // Shard file names (relative to dir) in their natural order.
  const std::vector<std::string>& shards() const { return shards_; }
  // All tensors, grouped by shard in shard order, in data-offset order within a shard.
  const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
  const CheckpointTensor* find(const std::string& name) const;
  // Zero-copy view; local checkpoints only (remote: use fetch()).
  TensorView view(const std::string& name) const;
  // The tensor's bytes, owned by the result when downloaded. Thread-safe.
  FetchedTensor fetch(const std::string& name) const;
  // Remote checkpoints only: where to download the tensor from.
  RemoteRange remote_range(const std::string& name) const;
  // Local checkpoints only.
  const SafetensorsFile& shard_file(const std::string& shard) const;
  // config.json of the directory, or null if absent.
  const nlohmann::json& config() const { return config_; }
  // Files in dir that are not shards nor the index (tokenizer, code, ...).
  // Remote: a URL cannot be listed, so these are the well-known side files
  // (kRemoteSideFiles, plus config.json) that the server has (HEAD 2xx).
  std::vector<std::string> other_files() const;
  // Writes other file `name` to `dst_path` atomically (copy or download).
  void copy_other_file(const std::string& name, const std::string& dst_path) const;
  bool has_index() const { return has_index_; }
  bool is_remote() const { return remote_; }

 private:
  std::string dir_;
  bool has_index_{false};
  std::vector<std::string> shards_;
  std::vector<CheckpointTensor> tensors_;
  std::map<std::string, std::size_t> by_name_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> files_;
  nlohmann::json config_;
  bool remote_{false};
  std::map<std::string, RemoteShard> remote_files_;

  static std::unique_ptr<Checkpoint> open_remote(const std::string& url);
  const std::vector<SafetensorsEntry>& shard_entries(const std::string& shard) const;
  bool shard_has(const std::string& shard, const std::string& tensor) const;
  std::string shard_location(const std::string& shard) const;
  std::uint64_t shard_data_start(const std::string& shard) const;
  void index_tensors(const std::map<std::string, std::string>& weight_map, const std::string& index_path);
};

// The float dtype of the model's weights, from the tensors (the first 2-D+
// float `.weight` tensor's; BF16 when none): what dialects adapt scale dtypes to when a
// checkpoint is written, and so what reading one back assumes.
DType model_float_dtype(const Checkpoint& checkpoint);

// Side files probed on a remote checkpoint (see other_files()).
inline constexpr const char* kRemoteSideFiles[] = {
    "generation_config.json", "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json",
    "tokenizer.model",        "vocab.json",              "merges.txt",     "chat_template.jinja"};

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
