#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_text.h"
#include "io/atomic_file.h"
#include "io/safetensors_hash.h"
#include "io/strict_json.h"
#include "io/xxh3.h"

namespace selq::io {
namespace {

using nlohmann::json;
constexpr std::uint64_t kU64Max = std::numeric_limits<std::uint64_t>::max();
constexpr const char* kMetadataKey = "__metadata__";

std::uint64_t sat_add(std::uint64_t a, std::uint64_t b) { return a > kU64Max - b ? kU64Max : a + b; }

std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

const char* json_type(const json& v) { return v.type_name(); }

// A non-negative JSON integer that fits u64; nlohmann stores integers beyond
// u64 as floats and negative ones as signed, so both are rejected here.
std::uint64_t json_u64(const json& v, const char* what, const ErrorWhere& where) {
  if (v.is_number_unsigned()) return v.get<std::uint64_t>();
  if (v.is_number_integer() && v.get<std::int64_t>() >= 0) return v.get<std::uint64_t>();
  if (v.is_number_integer())
    throw_bad_input(fmt::format("{} is negative ({})", what, v.get<std::int64_t>()), where);
  if (v.is_number_float())
    throw_bad_input(fmt::format("{} is not an integer or does not fit in 64 bits ({})", what, v.dump()),
                    where);
  throw_bad_input(fmt::format("{} must be an integer, got {}", what, json_type(v)), where);
}

SafetensorsEntry parse_tensor(const std::string& name, const json& v, const ErrorWhere& where) {
  if (!v.is_object())
    throw_bad_input(fmt::format("tensor entry must be an object, got {}", json_type(v)), where);
  SafetensorsEntry e;
  e.info.name = name;

  const auto dt = v.find("dtype");
  if (dt == v.end()) throw_bad_input("missing 'dtype'", where);
  if (!dt->is_string()) throw_bad_input(fmt::format("'dtype' must be a string, got {}", json_type(*dt)), where);
  const auto dtype = dtype_from_name(dt->get_ref<const std::string&>());
  if (!dtype) throw_bad_input(fmt::format("unknown dtype '{}'", dt->get_ref<const std::string&>()), where);
  e.info.dtype = *dtype;

  const auto sh = v.find("shape");
  if (sh == v.end()) throw_bad_input("missing 'shape'", where);
  if (!sh->is_array()) throw_bad_input(fmt::format("'shape' must be an array, got {}", json_type(*sh)), where);
  for (const auto& d : *sh) {
    const std::uint64_t dim = json_u64(d, "shape dimension", where);
    if (dim > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw_bad_input(fmt::format("shape dimension {} is too large", dim), where);
    e.info.shape.push_back(static_cast<std::int64_t>(dim));
  }

  const auto off = v.find("data_offsets");
  if (off == v.end()) throw_bad_input("missing 'data_offsets'", where);
  if (!off->is_array() || off->size() != 2)
    throw_bad_input(fmt::format("'data_offsets' must be an array of 2 integers, got {}", off->dump()), where);
  e.begin = json_u64((*off)[0], "data_offsets[0]", where);
  e.end = json_u64((*off)[1], "data_offsets[1]", where);
  return e;
}

// Size in bytes of a tensor, with the Rust crate's overflow and alignment rules.
std::uint64_t checked_nbytes(const TensorInfo& info, const ErrorWhere& where) {
  std::uint64_t n = 1;
  for (auto d : info.shape) {
    const auto ud = static_cast<std::uint64_t>(d);
    if (ud != 0 && n > kU64Max / ud)
      throw_bad_input(fmt::format("element count of shape {} overflows 64 bits", shape_to_string(info.shape)),
                      where);
    n *= ud;
  }
  const auto bits = static_cast<std::uint64_t>(dtype_bits(info.dtype));
  if (n > kU64Max / bits)
    throw_bad_input(fmt::format("size in bits of shape {} overflows 64 bits", shape_to_string(info.shape)),
                    where);
  if ((n * bits) % 8 != 0)
    throw_bad_input(fmt::format("{} elements of {} do not fill whole bytes (misaligned slice)", n,
                                dtype_name(info.dtype)),
                    where);
  return n * bits / 8;
}

struct Layout {
  std::string header;  // padded JSON
  std::vector<SafetensorsEntry> entries;
  std::uint64_t data_size{0};
};

Layout layout(const std::vector<TensorInfo>& tensors, const std::map<std::string, std::string>& metadata) {
  Layout out;
  std::string h = "{";
  bool first = true;
  try {
    if (!metadata.empty()) {
      json m = json::object();
      for (const auto& [k, v] : metadata) m[k] = v;
      h += fmt::format("\"{}\":{}", kMetadataKey, m.dump());
      first = false;
    }
    std::set<std::string> seen;
    std::uint64_t pos = 0;
    for (const auto& t : tensors) {
      const ErrorWhere where{"", t.name, {}};
      if (t.name == kMetadataKey) throw_bad_input("a tensor may not be named __metadata__", where);
      if (!seen.insert(t.name).second) throw_bad_input("duplicate tensor name", where);
      for (auto d : t.shape)
        if (d < 0) throw_bad_input(fmt::format("negative dimension in shape {}", shape_to_string(t.shape)), where);
      const std::uint64_t n = checked_nbytes(t, where);
      if (pos > kU64Max - n) throw_bad_input("data section size overflows 64 bits", where);
      SafetensorsEntry e{t, pos, pos + n};
      pos += n;
      // Written as text, as the manifest is (core/json_text.h says why).
      if (!first) h += ',';
      append_json_string(h, t.name);
      fmt::format_to(std::back_inserter(h), ":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                     dtype_name(t.dtype), fmt::join(t.shape, ","), e.begin, e.end);
      first = false;
      out.entries.push_back(std::move(e));
    }
    out.data_size = pos;
  } catch (const json::exception& e) {
    throw_bad_input(fmt::format("cannot encode header: {}", e.what()));
  }
  h += "}";
  // Spaces keep the data section 8-aligned, as the Rust writer does.
  h.append((8 - h.size() % 8) % 8, ' ');
  if (h.size() > kMaxHeaderBytes)
    throw_bad_input(fmt::format("header of {} bytes exceeds the limit of {}", h.size(), kMaxHeaderBytes));
  out.header = std::move(h);
  return out;
}

void put_le64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace

bool in_data_order(const SafetensorsEntry& a, const SafetensorsEntry& b) {
  if (a.begin != b.begin) return a.begin < b.begin;
  if (a.end != b.end) return a.end < b.end;
  return a.info.name < b.info.name;
}

ParsedHeader parse_safetensors_header(std::string_view header_json, std::uint64_t data_size,
                                      const std::string& file) {
  constexpr std::uint64_t kHeaderBase = 8;
  const std::uint64_t data_start = kHeaderBase + header_json.size();
  StrictJson sj = parse_json_strict(header_json, file, kHeaderBase);
  if (!sj.value.is_object())
    throw_bad_input(fmt::format("header must be a JSON object, got {}", json_type(sj.value)),
                    {file, "", kHeaderBase});

  ParsedHeader out;
  for (const auto& [name, v] : sj.value.items()) {
    const ErrorWhere where{file, name, kHeaderBase + sj.top_key_pos[name]};
    if (name == kMetadataKey) {
      if (v.is_object() && (v.contains("dtype") || v.contains("data_offsets")))
        throw_bad_input("a tensor may not be named __metadata__", where);
      if (!v.is_object())
        throw_bad_input(fmt::format("__metadata__ must be an object, got {}", json_type(v)), where);
      for (const auto& [k, mv] : v.items()) {
        if (!mv.is_string())
          throw_bad_input(fmt::format("__metadata__ value of '{}' must be a string, got {}", k, json_type(mv)),
                          where);
        out.metadata[k] = mv.get<std::string>();
      }
      continue;
    }
    out.entries.push_back(parse_tensor(name, v, where));
  }

  std::sort(out.entries.begin(), out.entries.end(), in_data_order);
  std::uint64_t expected = 0;
  for (const auto& e : out.entries) {
    const ErrorWhere where{file, e.info.name, sat_add(data_start, e.begin)};
    if (e.begin != expected)
      throw_bad_input(fmt::format("data_offsets [{}, {}] leave a {} at data offset {}", e.begin, e.end,
                                  e.begin > expected ? "gap" : "overlap", expected),
                      where);
    if (e.end < e.begin)
      throw_bad_input(fmt::format("data_offsets [{}, {}] end before they begin", e.begin, e.end), where);
    const std::uint64_t n = checked_nbytes(e.info, where);
    if (e.end - e.begin != n)
      throw_bad_input(fmt::format("data_offsets [{}, {}] span {} bytes but {} {} needs {}", e.begin, e.end,
                                  e.end - e.begin, dtype_name(e.info.dtype), shape_to_string(e.info.shape), n),
                      where);
    expected = e.end;
  }
  if (expected != data_size)
    throw_bad_input(fmt::format("tensors cover {} bytes of a {}-byte data section", expected, data_size),
                    {file, "", sat_add(data_start, expected)});
  return out;
}

ParsedHeader parse_safetensors_bytes(std::span<const std::uint8_t> file_bytes, const std::string& file) {
  if (file_bytes.size() < 8)
    throw_bad_input(fmt::format("file of {} bytes is too small for a safetensors header", file_bytes.size()),
                    {file, "", 0});
  const std::uint64_t n = read_le64(file_bytes.data());
  if (n > kMaxHeaderBytes)
    throw_bad_input(fmt::format("header length {} exceeds the limit of {}", n, kMaxHeaderBytes), {file, "", 0});
  if (n > file_bytes.size() - 8)
    throw_bad_input(fmt::format("header length {} runs past the end of the {}-byte file", n, file_bytes.size()),
                    {file, "", 0});
  const std::string_view header(reinterpret_cast<const char*>(file_bytes.data() + 8), n);
  return parse_safetensors_header(header, file_bytes.size() - 8 - n, file);
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) throw_io(fmt::format("cannot open: {}", std::strerror(errno)), {path, "", {}});
  struct stat st {};
  if (::fstat(f->fd_, &st) != 0) throw_io(fmt::format("cannot stat: {}", std::strerror(errno)), {path, "", {}});
  if (!S_ISREG(st.st_mode)) throw_bad_input("not a regular file", {path, "", {}});
  f->size_ = static_cast<std::uint64_t>(st.st_size);
  if (f->size_ < 8)
    throw_bad_input(fmt::format("file of {} bytes is too small for a safetensors header", f->size_),
                    {path, "", 0});
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, f->fd_, 0);
  if (m == MAP_FAILED) throw_io(fmt::format("mmap failed: {}", std::strerror(errno)), {path, "", {}});
  f->map_ = static_cast<const std::uint8_t*>(m);
  f->header_ = parse_safetensors_bytes({f->map_, f->size_}, path);
  f->data_start_ = 8 + read_le64(f->map_);
  for (std::size_t i = 0; i < f->header_.entries.size(); ++i) f->index_[f->header_.entries[i].info.name] = i;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), size_);
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

namespace {
// Address range of the pages under `bytes`, for madvise. Covering: from the
// page holding the first byte to the last byte (madvise rounds the length
// up). Inner: only the pages wholly inside `bytes`, empty when there are none.
struct PageRange {
  std::uintptr_t begin, end;
};
std::uintptr_t page_size() {
  static const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  return page;
}
PageRange covering_pages(std::span<const std::uint8_t> bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data());
  return {first & ~(page_size() - 1), first + bytes.size()};
}
PageRange inner_pages(std::span<const std::uint8_t> bytes) {
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data());
  const PageRange r{(first + page_size() - 1) & ~(page_size() - 1), (first + bytes.size()) & ~(page_size() - 1)};
  return r.end > r.begin ? r : PageRange{r.begin, r.begin};
}
}  // namespace

void populate_pages(std::span<const std::uint8_t> bytes) {
#ifdef MADV_POPULATE_READ
  if (bytes.empty()) return;
  const PageRange r = covering_pages(bytes);
  // Failure (an old kernel, EINTR) only means the pages fault in as usual.
  (void)::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_POPULATE_READ);
#else
  (void)bytes;
#endif
}

void prefetch_file_pages(std::span<const std::uint8_t> bytes) {
  if (bytes.empty()) return;
  const PageRange r = covering_pages(bytes);
  // In pieces: the kernel reads at most the device's optimal I/O size or the
  // readahead window per call (8 MiB of a 16 MiB tensor on the VM disk here).
  // Failure only means the pages are read when they are touched.
  constexpr std::uintptr_t kPiece = std::uintptr_t{2} << 20;
  for (auto a = r.begin; a < r.end; a += kPiece)
    (void)::madvise(reinterpret_cast<void*>(a), std::min(kPiece, r.end - a), MADV_WILLNEED);
}

void release_file_pages(std::span<const std::uint8_t> bytes) {
  // Whole pages only: the partial pages at either end may hold a neighbour.
  const PageRange r = inner_pages(bytes);
  if (r.end == r.begin) return;
  // Failure only means the pages stay mapped until the file is closed.
  (void)::madvise(reinterpret_cast<void*>(r.begin), r.end - r.begin, MADV_DONTNEED);
}

TensorView SafetensorsFile::view(const std::string& name) const {
  const SafetensorsEntry* e = find(name);
  if (!e) throw_bad_input("no such tensor", {path_, name, {}});
  return TensorView{&e->info, {map_ + data_start_ + e->begin, static_cast<std::size_t>(e->end - e->begin)}};
}

std::string safetensors_header(const std::vector<TensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  return layout(tensors, metadata).header;
}

namespace {
// fallocate, except on tmpfs: there it allocates and zeroes every page up
// front, which the writes then fill again (measured: a sixth of a page-cached
// quantize run). tmpfs only needs the free-space check, which statvfs gives.
// Returns 0 or -1 with errno set, like fallocate.
int reserve_space(int fd, std::uint64_t size) {
  constexpr long kTmpfsMagic = 0x01021994;  // TMPFS_MAGIC, linux/magic.h
  struct statfs sf {};
  if (::fstatfs(fd, &sf) == 0 && sf.f_type == kTmpfsMagic) {
    struct statvfs sv {};
    // f_blocks == 0: a tmpfs mounted without a size limit (nothing to check).
    if (::fstatvfs(fd, &sv) == 0 && sv.f_blocks > 0 && static_cast<std::uint64_t>(sv.f_bavail) * sv.f_frsize < size) {
      errno = ENOSPC;
      return -1;
    }
    errno = EOPNOTSUPP;  // the caller then sizes the file with ftruncate
    return -1;
  }
  return ::fallocate(fd, 0, 0, static_cast<off_t>(size));
}
}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string final_path, std::vector<TensorInfo> tensors,
                                     std::map<std::string, std::string> metadata, Open open)
    : final_path_(std::move(final_path)), temp_path_(temp_path_for(final_path_)), open_(open) {
  Layout l;
  try {
    l = layout(tensors, metadata);
  } catch (const Error& e) {
    throw_bad_input(e.message(), {final_path_, e.where().tensor, {}});
  }
  data_start_ = 8 + l.header.size();
  total_size_ = l.data_size;
  for (auto& e : l.entries) {
    // Nothing to write for an empty tensor: it is already complete.
    written_[e.info.name] = e.end == e.begin ? std::optional<std::uint64_t>(XXH3_64bits(nullptr, 0)) : std::nullopt;
    entries_[e.info.name] = std::move(e);
  }
  const bool shared = open == Open::Shared;
  fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | (shared ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_io(fmt::format("cannot create: {}", std::strerror(errno)), {temp_path_, "", {}});
  try {
    const std::uint64_t file_size = data_start_ + total_size_;
    // Reserving the space up front makes a full disk fail here, before hours
    // of quantization, rather than at the last tensor.
    if (file_size > 0 && reserve_space(fd_, file_size) != 0) {
      const int e = errno;
      if (e != EOPNOTSUPP && e != ENOSYS)
        throw_io(fmt::format("cannot reserve {} bytes: {}", file_size, std::strerror(e)), {final_path_, "", 0});
      if (::ftruncate(fd_, static_cast<off_t>(file_size)) != 0)
        throw_io(fmt::format("cannot size file to {} bytes: {}", file_size, std::strerror(errno)),
                 {final_path_, "", 0});
    }
    head_.assign(8, '\0');
    put_le64(reinterpret_cast<std::uint8_t*>(head_.data()), l.header.size());
    head_ += l.header;
    if (!shared) pwrite_all(fd_, head_.data(), head_.size(), 0, final_path_);
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    if (!shared) ::unlink(temp_path_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && open_ == Open::Own) ::unlink(temp_path_.c_str());
}

void SafetensorsWriter::flush() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) return;
  fsync_fd(fd_, final_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_io(fmt::format("close failed: {}", std::strerror(errno)), {final_path_, "", {}});
}

void SafetensorsWriter::write(const std::string& name, std::span<const std::uint8_t> bytes) {
  write(name, bytes, XXH3_64bits(bytes.data(), bytes.size()));
}

const SafetensorsEntry& SafetensorsWriter::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) throw_bad_input("tensor was not declared to the writer", {final_path_, name, {}});
  return it->second;
}

void SafetensorsWriter::write(const std::string& name, std::span<const std::uint8_t> bytes, std::uint64_t xxh3) {
  assert(xxh3 == XXH3_64bits(bytes.data(), bytes.size()));
  const SafetensorsEntry& e = entry(name);
  const std::uint64_t off = data_start_ + e.begin;
  if (bytes.size() != e.end - e.begin)
    throw_bad_input(fmt::format("got {} bytes, declared {} {} needs {}", bytes.size(), dtype_name(e.info.dtype),
                                shape_to_string(e.info.shape), e.end - e.begin),
                    {final_path_, name, off});
  pwrite_counted(name, off, bytes);
  finish(name, xxh3);
}

void SafetensorsWriter::write_part(const std::string& name, std::uint64_t offset, std::span<const std::uint8_t> bytes) {
  const SafetensorsEntry& e = entry(name);
  if (offset > e.end - e.begin || bytes.size() > e.end - e.begin - offset)
    throw_bad_input(fmt::format("{} bytes at {} run past the {} bytes declared", bytes.size(), offset, e.end - e.begin),
                    {final_path_, name, data_start_ + e.begin + offset});
  pwrite_counted(name, data_start_ + e.begin + offset, bytes);
}

void SafetensorsWriter::finish(const std::string& name, std::uint64_t xxh3) {
  entry(name);
  std::lock_guard<std::mutex> lock(mu_);
  written_[name] = xxh3;
}

void SafetensorsWriter::pwrite_counted(const std::string& name, std::uint64_t off, std::span<const std::uint8_t> bytes) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (committed_ || fd_ < 0) throw_bad_input("write after commit", {final_path_, name, off});
  }
  try {
    pwrite_all(fd_, bytes.data(), bytes.size(), off, final_path_);
  } catch (const Error& err) {
    throw_io(err.message(), {final_path_, name, err.where().offset});
  }
  bool writeback = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Every 32 MiB the disk is asked to start on what was written: left to
    // commit()'s fsync, a whole shard's write-back happened at the end with
    // the pipeline stalled (FP8 output on a VM disk took 1.6-1.9x cp + sync).
    constexpr std::uint64_t kWritebackEvery = std::uint64_t{32} << 20;
    written_since_writeback_ += bytes.size();
    if (written_since_writeback_ >= kWritebackEvery) {
      written_since_writeback_ = 0;
      writeback = true;
    }
  }
  if (writeback) start_writeback(fd_);
}

std::uint64_t SafetensorsWriter::content_hash() {
  std::vector<const SafetensorsEntry*> order;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [name, e] : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](const SafetensorsEntry* a, const SafetensorsEntry* b) { return in_data_order(*a, *b); });
  std::vector<std::uint64_t> hashes;
  for (const SafetensorsEntry* e : order) {
    const auto& h = written_.at(e->info.name);
    if (!h) throw_bad_input("content hash of a file with a tensor not yet written", {final_path_, e->info.name, {}});
    hashes.push_back(*h);
  }
  return combine_content_hash({reinterpret_cast<const std::uint8_t*>(head_.data()), head_.size()}, hashes);
}

void SafetensorsWriter::commit() {
  std::lock_guard<std::mutex> lock(mu_);
  if (committed_) return;
  std::vector<std::string> missing;
  for (const auto& [name, hash] : written_)
    if (!hash) missing.push_back(name);
  if (!missing.empty())
    throw_bad_input(fmt::format("{} declared tensor(s) never written, first '{}'", missing.size(), missing[0]),
                    {final_path_, missing[0], {}});
  if (open_ == Open::Shared) pwrite_all(fd_, head_.data(), head_.size(), 0, final_path_);
  fsync_fd(fd_, final_path_);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw_io(fmt::format("close failed: {}", std::strerror(errno)), {final_path_, "", {}});
  if (::rename(temp_path_.c_str(), final_path_.c_str()) != 0)
    throw_io(fmt::format("cannot rename {} to final name: {}", temp_path_, std::strerror(errno)),
             {final_path_, "", {}});
  committed_ = true;
  fsync_dir(parent_dir(final_path_));
}

std::vector<std::uint8_t> serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                                const std::map<std::string, std::string>& metadata) {
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  const Layout l = layout(infos, metadata);
  const std::size_t head = 8 + l.header.size();
  std::vector<std::uint8_t> out(head + static_cast<std::size_t>(l.data_size));
  put_le64(out.data(), l.header.size());
  std::memcpy(out.data() + 8, l.header.data(), l.header.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& e = l.entries[i];
    if (tensors[i].bytes.size() != e.end - e.begin)
      throw_bad_input(fmt::format("got {} bytes, shape needs {}", tensors[i].bytes.size(), e.end - e.begin),
                      {"", e.info.name, {}});
    if (!tensors[i].bytes.empty())
      std::memcpy(out.data() + head + e.begin, tensors[i].bytes.data(), tensors[i].bytes.size());
  }
  return out;
}

void save_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorInfo> infos;
  for (const auto& t : tensors) infos.push_back(t.info);
  SafetensorsWriter w(path, std::move(infos), metadata);
  for (const auto& t : tensors) w.write(t.info.name, t.bytes);
  w.commit();
}

}  // namespace selq::io
