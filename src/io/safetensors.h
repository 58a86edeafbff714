#pragma once
// safetensors reading (mmap, zero-copy, strict validation) and streaming
// writing (header reserved up front, temp file, fsync, atomic rename).
// Validation rules: docs/FORMAT_RULES.md §1.2 plus the extra ones in issue #2.
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace selq::io {

constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  TensorInfo info;
  std::uint64_t begin{0};  // relative to the data section
  std::uint64_t end{0};
};

// The order of entries in a file: by offset, then end (an empty tensor before
// the one it shares an offset with), then name. The reader returns entries in
// it; the writer's content hash follows it.
bool in_data_order(const SafetensorsEntry& a, const SafetensorsEntry& b);

// Parses and validates a header (the JSON after the 8-byte length) against a
// data section of `data_size` bytes. `file` is used in error messages only.
// Entries come back in data-offset order. Throws selq::Error (BadInput).
struct ParsedHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
ParsedHeader parse_safetensors_header(std::string_view header_json, std::uint64_t data_size,
                                      const std::string& file);

// Validates a whole in-memory file (8-byte length + header + data).
ParsedHeader parse_safetensors_bytes(std::span<const std::uint8_t> file_bytes,
                                     const std::string& file);

class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const SafetensorsEntry* find(const std::string& name) const;
  // Zero-copy view; throws BadInput naming the tensor if absent.
  TensorView view(const std::string& name) const;
  std::uint64_t data_start() const { return data_start_; }  // absolute file offset
  std::uint64_t file_size() const { return size_; }
  // The 8-byte header length and the header JSON: the file's first data_start() bytes.
  std::span<const std::uint8_t> head_bytes() const { return {map_, static_cast<std::size_t>(data_start_)}; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  int fd_{-1};
  const std::uint8_t* map_{nullptr};
  std::uint64_t size_{0};
  std::uint64_t data_start_{0};
  ParsedHeader header_;
  std::map<std::string, std::size_t> index_;
};

// Maps the pages under `bytes` (part of a file mapping, or any readable
// memory) in one call where the kernel can (MADV_POPULATE_READ, Linux 5.14+):
// touching them one fault at a time costs more than copying them on
// page-cached input. A no-op elsewhere.
void populate_pages(std::span<const std::uint8_t> bytes);

// Asks the kernel to read the pages under `bytes` (part of a file mapping)
// into the page cache in the background (MADV_WILLNEED), so that a later
// access does not wait on the disk; cheap when they are cached already.
void prefetch_file_pages(std::span<const std::uint8_t> bytes);

// Drops this process's mappings of the whole pages inside `bytes`, which must
// lie in a read-only file mapping (SafetensorsFile::view) whose content is no
// longer needed here; the page cache keeps the data, and a later access just
// faults it in again. Done per tensor as soon as it is consumed, the unmapping
// runs on all cores during the run instead of in one serial munmap at the end,
// and the resident set stays bounded by the tensors in flight rather than
// growing with the shard. Never call it on anonymous memory: that is zeroed.
void release_file_pages(std::span<const std::uint8_t> bytes);

// Streaming writer. All tensor infos are declared up front so the header (and
// every offset) is fixed before any data is written; tensors may then be
// written in any order and from several threads (pwrite at fixed offsets).
// Data goes to `<final>.selq-tmp`; commit() fsyncs and renames atomically.
// Destroying an uncommitted writer removes the temporary file.
class SafetensorsWriter {
 public:
  // Own: this writer alone creates the temporary file (truncated, header
  // written), and removes it unless committed. Shared: one of several
  // processes writing their tensors into one file (a shard split over ranks,
  // pipeline/shared_shard.h): the file is opened without truncation, sized,
  // and never removed; the header is written by the one that commits.
  enum class Open { Own, Shared };
  SafetensorsWriter(std::string final_path, std::vector<TensorInfo> tensors,
                    std::map<std::string, std::string> metadata = {}, Open open = Open::Own);
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Writes the bytes of tensor `name` (exactly its declared size). Thread-safe.
  void write(const std::string& name, std::span<const std::uint8_t> bytes);
  // The same, for a caller that has already hashed the bytes: `xxh3` must be
  // XXH3_64bits(bytes) (checked in debug builds).
  void write(const std::string& name, std::span<const std::uint8_t> bytes, std::uint64_t xxh3);
  // A tensor written in parts (a large one quantized in row blocks): `bytes`
  // at `offset` within tensor `name`. Thread-safe. It counts as written once
  // finish() gives the XXH3 of all its bytes.
  void write_part(const std::string& name, std::uint64_t offset, std::span<const std::uint8_t> bytes);
  void finish(const std::string& name, std::uint64_t xxh3);
  // io::file_content_hash of the file this writer produces; every tensor must
  // have been written.
  std::uint64_t content_hash();
  // fsync + rename to the final path + fsync of the directory (Shared: the
  // header is written first; every tensor must have been finish()ed).
  void commit();
  // Shared: fsync and close what this writer wrote, leaving the file under
  // its temporary name for the one that commits.
  void flush();
  const std::string& temp_path() const { return temp_path_; }
  // Where a writer for `final_path` puts its data until commit().
  static std::string temp_path_for(const std::string& final_path) { return final_path + ".selq-tmp"; }
  std::uint64_t total_size() const { return total_size_; }

 private:
  std::string final_path_;
  std::string temp_path_;
  int fd_{-1};
  bool committed_{false};
  Open open_{Open::Own};
  std::uint64_t data_start_{0};
  std::uint64_t total_size_{0};
  std::map<std::string, SafetensorsEntry> entries_;
  std::string head_;  // the file's first data_start_ bytes
  std::mutex mu_;
  std::map<std::string, std::optional<std::uint64_t>> written_;  // name -> XXH3 of what was written
  std::uint64_t written_since_writeback_{0};
  const SafetensorsEntry& entry(const std::string& name) const;
  void pwrite_counted(const std::string& name, std::uint64_t off, std::span<const std::uint8_t> bytes);
};

// The padded header JSON (without the 8-byte length) the writer uses for
// `tensors` laid out back to back in the given order; `__metadata__` first.
// Throws BadInput on duplicate or reserved names.
std::string safetensors_header(const std::vector<TensorInfo>& tensors,
                               const std::map<std::string, std::string>& metadata);

// In-memory tensors for whole-file serialization (tests, small outputs).
struct TensorBytes {
  TensorInfo info;
  std::vector<std::uint8_t> bytes;
};
// A complete file image (length + header + data).
std::vector<std::uint8_t> serialize_safetensors(const std::vector<TensorBytes>& tensors,
                                                const std::map<std::string, std::string>& metadata = {});
// Writes a complete file through SafetensorsWriter (temp + fsync + rename).
void save_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace selq::io
