#pragma once
// Small whole-file writes that never leave a partial file under the final name.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace selq::io {

// Writes `content` to `path.selq-tmp`, fsyncs, renames over `path`, fsyncs the dir.
void write_file_atomic(const std::string& path, std::string_view content);
// The same for a file made of several pieces, written one after another
// (no joined copy of large contents).
void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces);
// fsync a directory so a rename in it is durable.
void fsync_dir(const std::string& dir);
std::string read_file(const std::string& path);
// Copies a file (used for tokenizer and other non-tensor files) atomically.
void copy_file_atomic(const std::string& src, const std::string& dst);

// Low-level helpers shared by the writers; every failure is an Io error naming
// `file` and the absolute offset at which the write failed.
void pwrite_all(int fd, const void* data, std::size_t size, std::uint64_t offset,
                const std::string& file);
void fsync_fd(int fd, const std::string& file);
// Asks the kernel to start writing `fd`'s dirty pages back now, without
// waiting (sync_file_range SYNC_FILE_RANGE_WRITE), so that the disk works
// while the caller goes on and a later fsync has less left to wait for.
// Best effort: errors are ignored here, fsync reports what did not reach the disk.
void start_writeback(int fd);
// Directory part of `path` ("." when it has none).
std::string parent_dir(const std::string& path);

}  // namespace selq::io
