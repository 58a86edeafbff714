#include "io/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/http_range.h"
#include "io/strict_json.h"

namespace selq::io {
namespace {

namespace fs = std::filesystem;

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);  // follows symlinks
}

// A shard path from an index must name a file inside the checkpoint
// directory; anything else would let a downloaded index read arbitrary files.
void check_relative_path(const std::string& value, const std::string& tensor, const std::string& file,
                         std::uint64_t offset) {
  const ErrorWhere where{file, tensor, offset};
  if (value.empty()) throw_bad_input("weight_map entry is an empty path", where);
  if (value.find('\0') != std::string::npos) throw_bad_input("weight_map entry contains a NUL byte", where);
  if (value.front() == '/') throw_bad_input(fmt::format("weight_map entry '{}' is an absolute path", value), where);
  std::size_t start = 0;
  while (start <= value.size()) {
    const std::size_t slash = std::min(value.find('/', start), value.size());
    const std::string_view comp(value.data() + start, slash - start);
    if (comp == "..")
      throw_bad_input(fmt::format("weight_map entry '{}' leaves the checkpoint directory", value), where);
    if (comp.empty() || comp == ".")
      throw_bad_input(fmt::format("weight_map entry '{}' is not a plain relative path", value), where);
    start = slash + 1;
  }
}

nlohmann::json load_config(const fs::path& dir) {
  const fs::path p = dir / "config.json";
  if (!fs::exists(p)) return nullptr;
  const std::string text = read_file(p.string());
  StrictJson sj = parse_json_strict(text, p.string());
  if (!sj.value.is_object())
    throw_bad_input(fmt::format("config.json must be a JSON object, got {}", sj.value.type_name()),
                    {p.string(), "", 0});
  return std::move(sj.value);
}

}  // namespace

std::map<std::string, std::string> parse_index_json(std::string_view json, const std::string& file) {
  StrictJson sj = parse_json_strict(json, file);
  const auto& v = sj.value;
  if (!v.is_object())
    throw_bad_input(fmt::format("index must be a JSON object, got {}", v.type_name()), {file, "", 0});
  if (const auto md = v.find("metadata"); md != v.end()) {
    const ErrorWhere where{file, "", sj.top_key_pos["metadata"]};
    if (!md->is_object() && !md->is_null())
      throw_bad_input(fmt::format("'metadata' must be an object, got {}", md->type_name()), where);
    // total_size is advisory (some publishers store file sizes), but it must be a number.
    if (md->is_object())
      if (const auto ts = md->find("total_size"); ts != md->end() && !ts->is_number())
        throw_bad_input(fmt::format("'total_size' must be a number, got {}", ts->type_name()), where);
  }
  const auto wm = v.find("weight_map");
  if (wm == v.end()) throw_bad_input("index has no 'weight_map'", {file, "", 0});
  const std::uint64_t wm_pos = sj.top_key_pos["weight_map"];
  if (!wm->is_object())
    throw_bad_input(fmt::format("'weight_map' must be an object, got {}", wm->type_name()), {file, "", wm_pos});
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string())
      throw_bad_input(fmt::format("weight_map value must be a string, got {}", shard.type_name()),
                      {file, tensor, wm_pos});
    const auto& s = shard.get_ref<const std::string&>();
    check_relative_path(s, tensor, file, wm_pos);
    out[tensor] = s;
  }
  return out;
}

std::map<std::string, std::string> read_index_weight_map(const std::string& index_path,
                                                         const std::string& dir) {
  auto map = parse_index_json(read_file(index_path), index_path);
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) throw_io(fmt::format("cannot resolve directory: {}", ec.message()), {dir, "", {}});
  // A Hugging Face cache snapshot (<repo>/snapshots/<revision>) holds
  // symlinks into the same repo's <repo>/blobs; those stay allowed, anything
  // else outside the directory does not.
  std::optional<fs::path> hf_blobs;
  if (root.parent_path().filename() == "snapshots") hf_blobs = root.parent_path().parent_path() / "blobs";
  auto inside = [](const fs::path& p, const fs::path& dir) {
    const auto rel = p.lexically_relative(dir);
    return !rel.empty() && *rel.begin() != "..";
  };
  std::set<std::string> checked;
  for (const auto& [tensor, shard] : map) {
    if (!checked.insert(shard).second) continue;
    const fs::path resolved = fs::weakly_canonical(root / shard, ec);
    if (ec) throw_io(fmt::format("cannot resolve shard '{}': {}", shard, ec.message()), {index_path, tensor, {}});
    if (!inside(resolved, root) && !(hf_blobs && inside(resolved, *hf_blobs)))
      throw_bad_input(fmt::format("shard '{}' resolves to {}, outside the checkpoint directory {}{}", shard,
                                  resolved.string(), root.string(),
                                  hf_blobs ? fmt::format(" and its cache's {}", hf_blobs->string()) : ""),
                      {index_path, tensor, {}});
  }
  return map;
}

void write_index(const std::string& path, const std::map<std::string, std::string>& weight_map,
                 std::uint64_t total_size) {
  for (const auto& [tensor, shard] : weight_map) check_relative_path(shard, tensor, path, 0);
  nlohmann::json j;
  j["metadata"]["total_size"] = total_size;
  j["weight_map"] = nlohmann::json::object();
  for (const auto& [tensor, shard] : weight_map) j["weight_map"][tensor] = shard;
  write_file_atomic(path, j.dump(2) + "\n");
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  if (is_http_url(path)) return open_remote(path);
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw_io("no such file or directory", {path, "", {}});

  std::string index_path;
  std::map<std::string, std::string> weight_map;
  if (fs::is_directory(st)) {
    c->dir_ = path;
    if (is_regular(fs::path(path) / kIndexName)) {
      index_path = (fs::path(path) / kIndexName).string();
    } else {
      for (const auto& de : fs::directory_iterator(path, ec)) {
        const std::string name = de.path().filename().string();
        if (name.ends_with(".safetensors") && is_regular(de.path())) c->shards_.push_back(name);
      }
      if (ec) throw_io(fmt::format("cannot list directory: {}", ec.message()), {path, "", {}});
      std::sort(c->shards_.begin(), c->shards_.end());
      if (c->shards_.empty()) throw_bad_input("directory holds no .safetensors files", {path, "", {}});
    }
  } else if (path.ends_with(".json")) {
    index_path = path;
    c->dir_ = parent_dir(path);
  } else {
    c->dir_ = parent_dir(path);
    c->shards_.push_back(fs::path(path).filename().string());
  }

  if (!index_path.empty()) {
    c->has_index_ = true;
    weight_map = read_index_weight_map(index_path, c->dir_);
    std::set<std::string> shards;
    for (const auto& [t, s] : weight_map) shards.insert(s);
    c->shards_.assign(shards.begin(), shards.end());
    if (c->shards_.empty()) throw_bad_input("index lists no tensors", {index_path, "", {}});
    for (const auto& s : c->shards_)
      if (!is_regular(fs::path(c->dir_) / s))
        throw_bad_input(fmt::format("shard '{}' listed in the index is missing", s), {index_path, "", {}});
  }

  for (const auto& s : c->shards_) {
    const std::string p = (fs::path(c->dir_) / s).string();
    c->files_[s] = SafetensorsFile::open(p);
  }
  c->index_tensors(weight_map, index_path);
  c->config_ = load_config(c->dir_);
  return c;
}

// Cross-checks the index against the shard headers and builds the name table.
void Checkpoint::index_tensors(const std::map<std::string, std::string>& weight_map, const std::string& index_path) {
  for (const auto& [tensor, shard] : weight_map) {
    if (!shard_has(shard, tensor))
      throw_bad_input(fmt::format("tensor listed in index {} is not in shard '{}'", index_path, shard),
                      {shard_location(shard), tensor, {}});
  }
  for (const auto& s : shards_) {
    for (const auto& e : shard_entries(s)) {
      const auto [it, fresh] = by_name_.emplace(e.info.name, tensors_.size());
      if (!fresh)
        throw_bad_input(fmt::format("tensor appears in shard '{}' and again in shard '{}'",
                                    tensors_[it->second].shard, s),
                        {shard_location(s), e.info.name, shard_data_start(s) + e.begin});
      tensors_.push_back({e.info, s});
    }
  }
}

const std::vector<SafetensorsEntry>& Checkpoint::shard_entries(const std::string& shard) const {
  if (remote_) return remote_files_.at(shard).header.entries;
  return files_.at(shard)->entries();
}

bool Checkpoint::shard_has(const std::string& shard, const std::string& tensor) const {
  if (remote_) return remote_files_.at(shard).index.count(tensor) > 0;
  return files_.at(shard)->find(tensor) != nullptr;
}

std::string Checkpoint::shard_location(const std::string& shard) const {
  if (remote_) return remote_files_.at(shard).url;
  return (fs::path(dir_) / shard).string();
}

std::uint64_t Checkpoint::shard_data_start(const std::string& shard) const {
  if (remote_) return remote_files_.at(shard).data_start;
  return files_.at(shard)->data_start();
}

std::unique_ptr<Checkpoint> Checkpoint::open_remote(const std::string& url_in) {
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->remote_ = true;
  std::string url = url_in;
  while (!url.empty() && url.back() == '/') url.pop_back();
  const auto parent = [](const std::string& u) { return u.substr(0, u.rfind('/')); };
  const auto leaf = [](const std::string& u) { return u.substr(u.rfind('/') + 1); };

  std::string index_url;
  std::optional<std::string> index_text;
  if (url.ends_with(".safetensors")) {
    c->dir_ = parent(url);
    c->shards_.push_back(leaf(url));
  } else if (url.ends_with(".json")) {
    c->dir_ = parent(url);
    index_url = url;
    index_text = http_get_file(index_url, false);
  } else {
    c->dir_ = url;
    index_url = url_join(url, kIndexName);
    index_text = http_get_file(index_url, true);
    // No listing over HTTP: without an index the only shard we can know of
    // is the conventional single-file name.
    if (!index_text) c->shards_.push_back("model.safetensors");
  }

  std::map<std::string, std::string> weight_map;
  if (index_text) {
    c->has_index_ = true;
    weight_map = parse_index_json(*index_text, index_url);
    std::set<std::string> shards;
    for (const auto& [t, s] : weight_map) shards.insert(s);
    c->shards_.assign(shards.begin(), shards.end());
    if (c->shards_.empty()) throw_bad_input("index lists no tensors", {index_url, "", {}});
  }

  for (const auto& s : c->shards_) {
    RemoteShard r;
    r.url = url_join(c->dir_, s);
    std::uint64_t total = 0;
    const auto prefix = http_get_range(r.url, 0, 8, "", &total);
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[static_cast<std::size_t>(i)];
    if (n > kMaxHeaderBytes)
      throw_bad_input(fmt::format("header length {} exceeds the limit of {}", n, kMaxHeaderBytes), {r.url, "", 0});
    if (total < 8 || n > total - 8)
      throw_bad_input(fmt::format("header length {} runs past the end of the {}-byte file", n, total),
                      {r.url, "", 0});
    const auto header = http_get_range(r.url, 8, n);
    r.size = total;
    r.data_start = 8 + n;
    r.header = parse_safetensors_header(std::string_view(reinterpret_cast<const char*>(header.data()), header.size()),
                                        total - 8 - n, r.url);
    for (std::size_t i = 0; i < r.header.entries.size(); ++i) r.index[r.header.entries[i].info.name] = i;
    c->remote_files_.emplace(s, std::move(r));
  }
  c->index_tensors(weight_map, index_url);

  const std::string config_url = url_join(c->dir_, "config.json");
  if (const auto text = http_get_file(config_url, true)) {
    StrictJson sj = parse_json_strict(*text, config_url);
    if (!sj.value.is_object())
      throw_bad_input(fmt::format("config.json must be a JSON object, got {}", sj.value.type_name()),
                      {config_url, "", 0});
    c->config_ = std::move(sj.value);
  }
  return c;
}

FetchedTensor Checkpoint::fetch(const std::string& name) const {
  FetchedTensor out;
  if (!remote_) {
    out.view = view(name);
    return out;
  }
  const RemoteRange r = remote_range(name);
  // Not a vector: its zeroing would be a second pass over every byte.
  auto bytes = std::make_shared_for_overwrite<std::uint8_t[]>(r.length);
  const std::span<std::uint8_t> dst(bytes.get(), r.length);
  http_get_range_into(r.url, r.offset, dst, name);
  out.view = TensorView{&find(name)->info, dst};
  out.owner = std::move(bytes);
  return out;
}

RemoteRange Checkpoint::remote_range(const std::string& name) const {
  const CheckpointTensor* t = find(name);
  if (!t) throw_bad_input("no such tensor in checkpoint", {dir_, name, {}});
  if (!remote_) throw std::logic_error("remote_range of a local checkpoint");
  const RemoteShard& r = remote_files_.at(t->shard);
  const SafetensorsEntry& e = r.header.entries[r.index.at(name)];
  return {r.url, r.data_start + e.begin, e.end - e.begin};
}

void Checkpoint::copy_other_file(const std::string& name, const std::string& dst_path) const {
  if (!remote_) {
    copy_file_atomic((fs::path(dir_) / name).string(), dst_path);
    return;
  }
  write_file_atomic(dst_path, *http_get_file(url_join(dir_, name), false));
}

const CheckpointTensor* Checkpoint::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

TensorView Checkpoint::view(const std::string& name) const {
  const CheckpointTensor* t = find(name);
  if (!t) throw_bad_input("no such tensor in checkpoint", {dir_, name, {}});
  if (remote_) throw_unsupported("zero-copy views need a local checkpoint (remote tensors are fetched)", {dir_, name, {}});
  return files_.at(t->shard)->view(name);
}

const SafetensorsFile& Checkpoint::shard_file(const std::string& shard) const {
  if (remote_) throw_unsupported("this operation needs a local checkpoint, not a URL", {dir_, "", {}});
  const auto it = files_.find(shard);
  if (it == files_.end()) throw_bad_input(fmt::format("no shard '{}' in checkpoint", shard), {dir_, "", {}});
  return *it->second;
}

std::vector<std::string> Checkpoint::other_files() const {
  std::vector<std::string> out;
  if (remote_) {
    if (!config_.is_null()) out.push_back("config.json");
    for (const char* name : kRemoteSideFiles)
      if (http_exists(url_join(dir_, name))) out.push_back(name);
    std::sort(out.begin(), out.end());
    return out;
  }
  std::error_code ec;
  const std::set<std::string> shards(shards_.begin(), shards_.end());
  for (const auto& de : fs::directory_iterator(dir_, ec)) {
    const std::string name = de.path().filename().string();
    if (!is_regular(de.path()) || shards.count(name) || name == kIndexName) continue;
    // Tensor files and indexes of other layouts (and our own temporaries) are not side files.
    if (name.ends_with(".safetensors") || name.ends_with(".safetensors.index.json") ||
        name.ends_with(".selq-tmp"))
      continue;
    out.push_back(name);
  }
  if (ec) throw_io(fmt::format("cannot list directory: {}", ec.message()), {dir_, "", {}});
  std::sort(out.begin(), out.end());
  return out;
}

DType model_float_dtype(const Checkpoint& ckpt) {
  // Weights only: a quantized checkpoint's 2-D F32 block scales are not the model's dtype.
  for (const auto& t : ckpt.tensors())
    if (t.info.name.ends_with(".weight") && dtype_is_float_source(t.info.dtype) && t.info.shape.size() >= 2)
      return t.info.dtype;
  return DType::BF16;
}

}  // namespace selq::io
