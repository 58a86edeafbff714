#include "calibration/gptq_states.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"

namespace selq::calibration {

namespace fs = std::filesystem;

LayerStates::LayerStates(std::string dir, std::string fingerprint, const std::vector<std::size_t>& lengths,
                         std::int64_t hidden_size)
    : dir_(std::move(dir)), fingerprint_(std::move(fingerprint)), hidden_size_(hidden_size) {
  offsets_.push_back(0);
  for (std::size_t n : lengths) offsets_.push_back(offsets_.back() + n * static_cast<std::size_t>(hidden_size));
  for (std::size_t i = 0; i < 2; ++i) map(files_[i], i);
}

LayerStates::~LayerStates() {
  for (auto& m : files_)
    if (m.data) ::munmap(m.data, m.bytes);
}

void LayerStates::map(Mapped& m, std::size_t index) {
  m.path = (fs::path(dir_) / fmt::format("hidden-{}.f32", index)).string();
  m.bytes = std::max<std::size_t>(offsets_.back() * sizeof(float), 1);
  const int fd = ::open(m.path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw_io(fmt::format("cannot open: {}", std::strerror(errno)), {m.path});
  struct stat st {};
  const bool sized = ::fstat(fd, &st) == 0 && static_cast<std::size_t>(st.st_size) == m.bytes;
  if (!sized) {  // another run's states, or none: the index no longer names valid ones
    std::error_code ec;
    fs::remove(fs::path(dir_) / kIndexFile, ec);
    if (::ftruncate(fd, 0) != 0) {
      const int e = errno;
      ::close(fd);
      throw_io(fmt::format("cannot truncate: {}", std::strerror(e)), {m.path});
    }
  }
  // Blocks reserved now: a full disk fails here, not as SIGBUS on a write to the mapping.
  if (const int e = ::posix_fallocate(fd, 0, static_cast<off_t>(m.bytes)); e != 0) {
    ::close(fd);
    throw_io(fmt::format("cannot reserve {} bytes for the calibration states: {}", m.bytes, std::strerror(e)),
             {m.path});
  }
  void* p = ::mmap(nullptr, m.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) throw_io(fmt::format("cannot map: {}", std::strerror(e)), {m.path});
  m.data = static_cast<float*>(p);
}

std::span<float> LayerStates::sequence(const Mapped& m, std::size_t s) const {
  return {m.data + offsets_[s], offsets_[s + 1] - offsets_[s]};
}

std::int64_t LayerStates::resume() {
  const std::string index = (fs::path(dir_) / kIndexFile).string();
  if (!fs::exists(index)) return -1;
  const auto j = nlohmann::json::parse(io::read_file(index), nullptr, false);
  if (!j.is_object() || j.value("fingerprint", "") != fingerprint_ || !j.contains("layer") || !j.contains("file") ||
      j.value("floats", std::uint64_t{0}) != offsets_.back())
    return -1;
  input_ = j.at("file").get<int>() == 1 ? 1 : 0;
  return j.at("layer").get<std::int64_t>();
}

void LayerStates::set(std::size_t s, std::span<const float> states) {
  const auto dst = sequence(files_[input_], s);
  if (states.size() != dst.size())
    throw Error(ErrorKind::Internal, fmt::format("LayerStates::set: {} floats for a sequence of {}", states.size(),
                                                 dst.size()));
  std::copy(states.begin(), states.end(), dst.begin());
}

std::vector<std::span<const float>> LayerStates::inputs() const {
  std::vector<std::span<const float>> out;
  for (std::size_t s = 0; s + 1 < offsets_.size(); ++s) out.push_back(sequence(files_[input_], s));
  return out;
}

void LayerStates::advance(std::int64_t layer, const std::function<void(std::size_t, float*)>& run) {
  const Mapped& in = files_[input_];
  const Mapped& out = files_[1 - input_];
  std::vector<float> x;
  for (std::size_t s = 0; s + 1 < offsets_.size(); ++s) {
    const auto src = sequence(in, s);
    x.assign(src.begin(), src.end());
    run(s, x.data());
    std::copy(x.begin(), x.end(), sequence(out, s).begin());
  }
  if (::msync(out.data, out.bytes, MS_SYNC) != 0)
    throw_io(fmt::format("cannot write the calibration states: {}", std::strerror(errno)), {out.path});
  input_ = 1 - input_;
  const nlohmann::json j = {
      {"fingerprint", fingerprint_}, {"layer", layer}, {"file", input_}, {"floats", offsets_.back()}};
  io::write_file_atomic((fs::path(dir_) / kIndexFile).string(), j.dump() + "\n");
}

}  // namespace selq::calibration
