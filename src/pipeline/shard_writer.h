#pragma once
// Internals shared by the file-to-file and in-place quantize paths.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <oneapi/tbb/global_control.h>

#include "io/checkpoint.h"
#include "pipeline/buffer_pool.h"
#include "pipeline/journal.h"
#include "pipeline/quantize.h"

namespace selq::pipeline::detail {

// Where the bytes of a planned source tensor come from: a view of a local
// mapping, or downloaded bytes the result owns (remote sources).
struct TensorSource {
  std::function<io::FetchedTensor(const std::string& shard, const std::string& tensor)> fetch;
  // Fetched bytes are views of read-only file mappings: a passed-through
  // tensor in flight then holds no memory of its own (sizes the pipeline's
  // tokens), and a consumed tensor's pages may be unmapped.
  bool views_of_files{false};
  io::FetchedTensor operator()(const std::string& shard, const std::string& tensor) const {
    return fetch(shard, tensor);
  }
};

void write_shard(const TensorSource& source, const Plan& plan, const PlannedShard& shard, const std::string& path,
                 const QuantizeOptions& options, const std::map<std::string, float>& group_amax,
                 Journal& journal, std::vector<TensorRecord>& records, Progress& progress, BufferPool& pool);
void adopt_committed_shard(const Plan& plan, const PlannedShard& shard, const std::string& path,
                           const Journal& journal, std::vector<TensorRecord>& records, Progress& progress,
                           const QuantizeOptions& options);
// NVFP4 fused-group amax: computed once and kept in the journal.
std::map<std::string, float> journaled_group_amax(Journal& journal, const TensorSource& source, const Plan& plan);
void remove_all_quietly(const std::string& path);

struct ThreadLimit {
  explicit ThreadLimit(int threads);
  std::unique_ptr<tbb::global_control> limit;
};

}  // namespace selq::pipeline::detail
