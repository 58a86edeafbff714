#pragma once
// The journal that makes a quantize run resumable. It lives next to the shards
// being written (the staging directory of a file-to-file run, or
// `.selq-inplace/` of an in-place run) and records, per output shard, the
// intent to commit (the new file's io::file_content_hash, written before the
// rename, which is the commit) with the shard's tensor records for the
// manifest. A shard counts as committed only if the file on disk has the
// recorded hash, so a journal entry can never vouch for a file that is not
// there. Events are appended one line each (journal.cpp says why).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/manifest.h"

namespace selq::pipeline {

class Journal {
 public:
  // Loads `path` if it exists and its fingerprint matches; otherwise starts empty.
  // resumed() tells whether an existing journal was reused.
  Journal(std::string path, std::string plan_fingerprint);
  // Also takes in the shards (and group amax) of the other ranks' journals
  // in `others` that have this fingerprint: a rerun with another rank count
  // adopts what any rank committed (pipeline/distribute.h).
  Journal(std::string path, std::string plan_fingerprint, const std::vector<std::string>& others);
  bool resumed() const { return resumed_; }
  bool has_existing_with_other_fingerprint() const { return other_fingerprint_; }

  // NVFP4 fused-group amax values, fixed on the first run (their source data
  // may already be overwritten when resuming an in-place run).
  bool has_group_amax() const { return !group_amax_.is_null(); }
  std::map<std::string, float> group_amax() const;
  void set_group_amax(const std::map<std::string, float>& amax);

  // True if the shard at `file_path` is committed with the recorded hash.
  bool is_committed(const std::string& shard, const std::string& file_path) const;
  // Written after the new shard is complete and fsynced under its temporary
  // name, before the rename: the rename is the commit. Carries the shard's
  // tensor records so a resumed run can write the full manifest.
  void record_intent(const std::string& shard, std::uint64_t file_hash,
                     const std::vector<std::pair<std::size_t, TensorRecord>>& records);
  // Tensor records of a committed shard (plan index -> record).
  std::vector<std::pair<std::size_t, TensorRecord>> records(const std::string& shard) const;

 private:
  Journal() = default;
  // Reads `path` into this journal; false when it is another plan's.
  bool read(const std::string& path, const std::string& fingerprint, bool& other_fingerprint);
  void apply(const nlohmann::json& event);
  void append(const nlohmann::json& event);  // one line, fsynced
  void rewrite();                            // the whole file, atomically
  std::string path_, fingerprint_;
  std::map<std::string, nlohmann::json> shards_;  // name -> {"hash", "records"}
  nlohmann::json group_amax_;                     // null until set
  bool resumed_{false};
  bool other_fingerprint_{false};
  bool needs_rewrite_{false};
};

// Fingerprint of a plan + recipe: two runs with equal fingerprints write equal bytes.
std::string plan_fingerprint(const Plan& plan, const recipe::Recipe& recipe);

nlohmann::json record_to_json(const TensorRecord& r);
TensorRecord record_from_json(const nlohmann::json& j);

}  // namespace selq::pipeline
