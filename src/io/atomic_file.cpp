#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"

namespace selq::io {
namespace {

std::string errno_text(int e) { return std::strerror(e); }

// Closes and unlinks a temporary file unless released; keeps every error path
// from leaving a half-written file behind.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_io(fmt::format("cannot create: {}", errno_text(errno)), {path_, "", {}});
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!done_) ::unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  void commit_to(const std::string& final_path) {
    fsync_fd(fd_, path_);
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw_io(fmt::format("close failed: {}", errno_text(errno)), {path_, "", {}});
    if (::rename(path_.c_str(), final_path.c_str()) != 0)
      throw_io(fmt::format("cannot rename {} to final name: {}", path_, errno_text(errno)),
               {final_path, "", {}});
    done_ = true;
    fsync_dir(parent_dir(final_path));
  }

 private:
  std::string path_;
  int fd_{-1};
  bool done_{false};
};

}  // namespace

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void pwrite_all(int fd, const void* data, std::size_t size, std::uint64_t offset,
                const std::string& file) {
  const auto* p = static_cast<const std::uint8_t*>(data);
  std::size_t done = 0;
  while (done < size) {
    // Large single writes are split; Linux caps one write at ~2 GiB anyway.
    const std::size_t chunk = std::min<std::size_t>(size - done, std::size_t{1} << 30);
    const ssize_t n = ::pwrite(fd, p + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io(fmt::format("write failed: {}", errno_text(errno)), {file, "", offset + done});
    }
    if (n == 0) throw_io("write made no progress", {file, "", offset + done});
    done += static_cast<std::size_t>(n);
  }
}

void fsync_fd(int fd, const std::string& file) {
  if (::fsync(fd) != 0) throw_io(fmt::format("fsync failed: {}", errno_text(errno)), {file, "", {}});
}

void start_writeback(int fd) {
  // Linux-specific; on tmpfs (no writeback) it returns at once.
  (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_io(fmt::format("cannot open directory: {}", errno_text(errno)), {dir, "", {}});
  const int rc = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some filesystems cannot fsync directories; the rename is still done.
  if (rc != 0 && e != EINVAL && e != EROFS)
    throw_io(fmt::format("fsync of directory failed: {}", errno_text(e)), {dir, "", {}});
}

void write_file_atomic(const std::string& path, std::string_view content) {
  write_file_atomic(path, std::span<const std::string_view>(&content, 1));
}

void write_file_atomic(const std::string& path, std::span<const std::string_view> pieces) {
  TempFile tmp(path + ".selq-tmp");
  std::uint64_t offset = 0;
  for (const auto& p : pieces) {
    pwrite_all(tmp.fd(), p.data(), p.size(), offset, path);
    offset += p.size();
  }
  tmp.commit_to(path);
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_io(fmt::format("cannot open: {}", errno_text(errno)), {path, "", {}});
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw_io(fmt::format("read failed: {}", errno_text(e)), {path, "", out.size()});
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

void copy_file_atomic(const std::string& src, const std::string& dst) {
  const int in = ::open(src.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw_io(fmt::format("cannot open: {}", errno_text(errno)), {src, "", {}});
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{in};
  TempFile tmp(dst + ".selq-tmp");
  std::vector<char> buf(1 << 20);
  std::uint64_t off = 0;
  for (;;) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io(fmt::format("read failed: {}", errno_text(errno)), {src, "", off});
    }
    if (n == 0) break;
    pwrite_all(tmp.fd(), buf.data(), static_cast<std::size_t>(n), off, dst);
    off += static_cast<std::uint64_t>(n);
  }
  tmp.commit_to(dst);
}

}  // namespace selq::io
