#pragma once
// Small whole-file writes that never leave a partial file under the final name.
#include <string>
#include <string_view>

namespace selq::io {

// Writes `content` to `path.selq-tmp`, fsyncs, renames over `path`, fsyncs the dir.
void write_file_atomic(const std::string& path, std::string_view content);
// fsync a directory so a rename in it is durable.
void fsync_dir(const std::string& dir);
std::string read_file(const std::string& path);
// Copies a file (used for tokenizer and other non-tensor files) atomically.
void copy_file_atomic(const std::string& src, const std::string& dst);

}  // namespace selq::io
