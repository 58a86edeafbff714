#include "pipeline/journal.h"

#include <fcntl.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_hash.h"
#include "io/xxh3.h"

namespace fs = std::filesystem;

namespace selq::pipeline {

namespace {

nlohmann::json metrics_to_json(const quant::ErrorMetrics& m) {
  return {m.sum_sq_ref, m.sum_sq_err, m.sum_dot, m.sum_sq_dq, m.max_abs_err,
          m.elements,   m.clipped_elements, m.blocks, m.clipped_blocks};
}

quant::ErrorMetrics metrics_from_json(const nlohmann::json& j) {
  quant::ErrorMetrics m;
  m.sum_sq_ref = j.at(0);
  m.sum_sq_err = j.at(1);
  m.sum_dot = j.at(2);
  m.sum_sq_dq = j.at(3);
  m.max_abs_err = j.at(4);
  m.elements = j.at(5);
  m.clipped_elements = j.at(6);
  m.blocks = j.at(7);
  m.clipped_blocks = j.at(8);
  return m;
}

}  // namespace

nlohmann::json record_to_json(const TensorRecord& r) {
  nlohmann::json j = {{"source", r.source}, {"source_hash", r.source_hash}, {"output_hashes", r.output_hashes}};
  if (r.metrics) j["metrics"] = metrics_to_json(*r.metrics);
  return j;
}

TensorRecord record_from_json(const nlohmann::json& j) {
  TensorRecord r;
  r.source = j.at("source");
  r.source_hash = j.at("source_hash");
  r.output_hashes = j.at("output_hashes").get<std::vector<std::uint64_t>>();
  if (j.contains("metrics")) r.metrics = metrics_from_json(j["metrics"]);
  return r;
}

namespace {

// What plan_fingerprint hashes: every field of the plan that decides the
// output bytes (not the source path: the same plan may be read from a saved
// copy of the headers). Written field by field, as the manifest is: a JSON
// tree of 70,000 entries costs seconds (docs/BENCHMARKS.md, "The manifest as
// text"). Fields end with \x1f and records with \x1e, so that no two
// different plans give the same text.
class FingerprintText {
 public:
  template <typename T>
  FingerprintText& operator<<(const T& v) {
    fmt::format_to(std::back_inserter(text_), "{}\x1f", v);
    return *this;
  }
  FingerprintText& operator<<(const Shape& shape) {
    for (auto d : shape) fmt::format_to(std::back_inserter(text_), "{},", d);
    text_ += '\x1f';
    return *this;
  }
  FingerprintText& operator<<(const TensorInfo& info) { return *this << info.name << dtype_name(info.dtype) << info.shape; }
  void end_record() { text_ += '\x1e'; }
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

std::string scheme_label(const std::optional<quant::SchemeSpec>& s) { return s ? s->name() : "-"; }

}  // namespace

std::string plan_fingerprint(const Plan& plan, const recipe::Recipe& recipe) {
  FingerprintText f;
  f << plan.recipe_path << exporter::dialect_name(plan.dialect) << plan.tensors.size();
  f.end_record();
  for (const auto& t : plan.tensors) {
    f << t.source << t.source_shard << t.source_info << static_cast<int>(t.action) << scheme_label(t.scheme) << t.module
      << t.fused_group << (t.input_amax ? fmt::format("{:a}", *t.input_amax) : "-");
    if (t.exact_from_mxfp4) f << "pow2";
    if (t.channel_weights)  // rounding `weighted`: another calibration makes other bytes
      f << fmt::format("{:016x}", XXH3_64bits(t.channel_weights->data(), t.channel_weights->size() * sizeof(float)));
    if (t.stored) {
      f << t.stored->scheme.name() << t.stored->shape << t.stored->bytes;
      for (const auto& n : t.stored->tensors) f << n;
    }
    f.end_record();
    for (const auto& o : t.outputs) {
      f << o.info << (o.role ? static_cast<int>(*o.role) : -1);
      f.end_record();
    }
  }
  for (const auto& s : plan.shards) {
    f << s.name;
    for (auto i : s.tensors) f << i;
    f.end_record();
  }
  for (const auto& m : plan.linear_modules) {
    f << m.module << scheme_label(m.scheme) << m.preexisting;
    f.end_record();
  }
  for (const auto& w : plan.warnings) f << w;
  f.end_record();
  if (!plan.rounded_fingerprint.empty()) {  // gptq: another calibration makes other bytes
    f << plan.rounded_fingerprint;
    f.end_record();
  }
  const std::string s = f.text() + recipe.text + "\n" + SELQ_VERSION;
  return hash_hex(XXH3_64bits(s.data(), s.size()));
}

// The file is JSON Lines: a header {"version", "fingerprint"}, then one line
// per event, appended and fsynced: {"group_amax": {...}} or {"shard", "hash",
// "records"}. Appending keeps a run over S shards and T tensors at O(T) bytes
// written (rewriting the whole state at each shard was O(S x T)). A line cut
// short by a crash is dropped when the journal is read back.
namespace {

constexpr int kVersion = 3;

// One line of the journal, or a discarded value if it is not a whole one.
nlohmann::json parse_line(std::string_view line) { return nlohmann::json::parse(line, nullptr, false); }

}  // namespace

bool Journal::read(const std::string& path, const std::string& fingerprint, bool& other_fingerprint) {
  const std::string text = io::read_file(path);
  std::size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) break;  // a torn last line: its event never happened
    const auto j = parse_line(std::string_view(text).substr(pos, end - pos));
    pos = end + 1;
    if (!j.is_object()) {
      if (header) throw_bad_input("corrupt journal: the first line is not a JSON object", {path});
      break;
    }
    if (header) {
      header = false;
      if (j.value("fingerprint", "") != fingerprint) {
        other_fingerprint = true;
        return false;
      }
      if (j.contains("shards")) {  // version 2: the whole state in one object
        for (const auto& [name, entry] : j["shards"].items()) shards_[name] = entry;
        if (j.contains("group_amax")) group_amax_ = j["group_amax"];
        needs_rewrite_ = true;
        return true;
      }
      continue;
    }
    apply(j);
  }
  if (header) throw_bad_input("corrupt journal: no header line", {path});
  needs_rewrite_ = pos != text.size();  // drop the torn tail before appending after it
  return true;
}

void Journal::apply(const nlohmann::json& event) {
  if (event.contains("group_amax")) group_amax_ = event["group_amax"];
  if (event.contains("shard")) shards_[event["shard"].get<std::string>()] = {{"hash", event["hash"]}, {"records", event["records"]}};
}

Journal::Journal(std::string path, std::string fingerprint) : path_(std::move(path)), fingerprint_(std::move(fingerprint)) {
  if (fs::exists(path_)) {
    try {
      resumed_ = read(path_, fingerprint_, other_fingerprint_);
    } catch (const nlohmann::json::exception& e) {
      throw_bad_input(fmt::format("corrupt journal: {}", e.what()), {path_});
    }
    if (!resumed_) {
      shards_.clear();
      group_amax_ = nullptr;
    }
  }
  if (!resumed_ || needs_rewrite_) rewrite();
}

Journal::Journal(std::string path, std::string fingerprint, const std::vector<std::string>& others)
    : Journal(std::move(path), fingerprint) {
  for (const auto& other : others) {
    if (fs::path(other) == fs::path(path_) || !fs::exists(other)) continue;
    Journal theirs;
    bool foreign = false;
    try {
      if (!theirs.read(other, fingerprint, foreign)) continue;
    } catch (const std::exception&) {
      continue;  // another rank's unreadable journal: its shards are redone
    }
    for (const auto& [name, entry] : theirs.shards_)
      if (!shards_.count(name)) {
        shards_[name] = entry;
        append({{"shard", name}, {"hash", entry["hash"]}, {"records", entry["records"]}});
        resumed_ = true;
      }
    if (!theirs.group_amax_.is_null() && group_amax_.is_null()) {
      group_amax_ = theirs.group_amax_;
      append({{"group_amax", group_amax_}});
      resumed_ = true;
    }
  }
}

std::map<std::string, float> Journal::group_amax() const {
  std::map<std::string, float> out;
  // Stored as raw float bits so that the value is exact across runs.
  for (const auto& [k, v] : group_amax_.items()) out[k] = std::bit_cast<float>(v.get<std::uint32_t>());
  return out;
}

void Journal::set_group_amax(const std::map<std::string, float>& amax) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : amax) j[k] = std::bit_cast<std::uint32_t>(v);
  group_amax_ = j;
  append({{"group_amax", group_amax_}});
}

bool Journal::is_committed(const std::string& shard, const std::string& file_path) const {
  const auto it = shards_.find(shard);
  if (it == shards_.end() || !fs::exists(file_path)) return false;
  // An intent whose file is on disk with the recorded hash is a commit, even
  // if the run died right after the rename.
  return io::file_content_hash(file_path) == it->second.at("hash").get<std::uint64_t>();
}

void Journal::record_intent(const std::string& shard, std::uint64_t file_hash,
                            const std::vector<std::pair<std::size_t, TensorRecord>>& records) {
  nlohmann::json rs = nlohmann::json::array();
  for (const auto& [i, r] : records) rs.push_back({{"index", i}, {"record", record_to_json(r)}});
  append({{"shard", shard}, {"hash", file_hash}, {"records", rs}});
  shards_[shard] = {{"hash", file_hash}, {"records", std::move(rs)}};
}

std::vector<std::pair<std::size_t, TensorRecord>> Journal::records(const std::string& shard) const {
  std::vector<std::pair<std::size_t, TensorRecord>> out;
  for (const auto& e : shards_.at(shard).at("records"))
    out.emplace_back(e.at("index").get<std::size_t>(), record_from_json(e.at("record")));
  return out;
}

void Journal::rewrite() {
  std::string text = nlohmann::json{{"version", kVersion}, {"fingerprint", fingerprint_}}.dump() + "\n";
  if (!group_amax_.is_null()) text += nlohmann::json{{"group_amax", group_amax_}}.dump() + "\n";
  for (const auto& [name, entry] : shards_)
    text += nlohmann::json{{"shard", name}, {"hash", entry["hash"]}, {"records", entry["records"]}}.dump() + "\n";
  io::write_file_atomic(path_, text);
  needs_rewrite_ = false;
}

void Journal::append(const nlohmann::json& event) {
  const std::string line = event.dump() + "\n";
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);  // one writer per journal file
  if (fd < 0) throw_io(fmt::format("cannot open journal: {}", std::strerror(errno)), {path_});
  try {
    io::pwrite_all(fd, line.data(), line.size(), static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END)), path_);
    io::fsync_fd(fd, path_);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

}  // namespace selq::pipeline
