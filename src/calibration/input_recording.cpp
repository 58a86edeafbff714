#include "calibration/input_recording.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "calibration/input_hessians.h"
#include "core/error.h"

namespace selq::calibration {

using runtime::Linear;

namespace {

const std::uint8_t* map_read_only(int fd, std::uint64_t bytes, const std::string& path) {
  if (bytes == 0) return nullptr;
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw_io(fmt::format("cannot map the layer's input recording: {}", std::strerror(errno)), {path});
  ::madvise(p, bytes, MADV_SEQUENTIAL);
  return static_cast<const std::uint8_t*>(p);
}

void write_all(int fd, const void* data, std::size_t bytes, const std::string& path) {
  const auto* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw_io(fmt::format("cannot write the layer's input recording: {}", n < 0 ? std::strerror(errno) : "no progress"),
               {path});
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
}

std::vector<std::uint64_t> read_index(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw_io("cannot open another rank's recording index", {path});
  std::vector<std::uint64_t> words(static_cast<std::size_t>(in.tellg()) / sizeof(std::uint64_t));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(words.data()), static_cast<std::streamsize>(words.size() * sizeof(std::uint64_t)));
  if (!in) throw_io("cannot read another rank's recording index", {path});
  return words;
}

}  // namespace

InputRecording::InputRecording(std::string path, const std::vector<Linear*>& linears) : path_(std::move(path)) {
  for (Linear* l : linears)
    if (of_input_.emplace(input_key(l->module), in_.size()).second) {
      slot_[l] = in_.size();
      in_.push_back(l->in);
    }
  for (auto& part : calls_) part.resize(in_.size());
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_io(fmt::format("cannot create the layer's input recording: {}", std::strerror(errno)), {path_});
}

InputRecording::~InputRecording() {
  for (const Mapping& m : maps_)
    if (m.data) ::munmap(const_cast<std::uint8_t*>(m.data), m.bytes);
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  std::filesystem::remove(path_ + ".calls", ec);
}

void InputRecording::hook(void* ctx, const Linear& l, const float* x, std::int64_t rows) {
  auto& self = *static_cast<InputRecording*>(ctx);
  const auto it = self.slot_.find(&l);
  if (it == self.slot_.end() || rows == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(rows * l.in) * sizeof(float);
  self.calls_[static_cast<int>(self.part_)][it->second].push_back({self.written_, rows, 0});
  write_all(self.fd_, x, bytes, self.path_);
  self.written_ += bytes;
}

void InputRecording::finish() { maps_.assign(1, {map_read_only(fd_, written_, path_), written_}); }

// The index file: u64 slots, then per part and slot a u64 count and that many
// (u64 offset, i64 rows) pairs. Binary, since it lives for one layer between ranks of one build.
void InputRecording::share(dist::Ranks& ranks, const std::function<std::string(int)>& path_of) {
  if (ranks.size() == 1) return;
  std::vector<std::uint64_t> index{in_.size()};
  for (const auto& part : calls_)
    for (const auto& slot : part) {
      index.push_back(slot.size());
      for (const Call& c : slot) {
        index.push_back(c.offset);
        index.push_back(static_cast<std::uint64_t>(c.rows));
      }
    }
  {
    const std::string ipath = path_ + ".calls";
    const int fd = ::open(ipath.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw_io(fmt::format("cannot create the recording's index: {}", std::strerror(errno)), {ipath});
    write_all(fd, index.data(), index.size() * sizeof(std::uint64_t), ipath);
    ::close(fd);
  }
  ranks.barrier();  // every rank's recording and index are written
  std::vector<std::vector<Call>> merged[2];
  for (auto& part : merged) part.resize(in_.size());
  const Mapping own = maps_.at(0);
  maps_.assign(static_cast<std::size_t>(ranks.size()), {});
  for (int k = 0; k < ranks.size(); ++k) {
    const auto file = static_cast<std::size_t>(k);
    if (k == ranks.rank()) {
      maps_[file] = own;
      for (int part = 0; part < 2; ++part)
        for (std::size_t slot = 0; slot < in_.size(); ++slot)
          for (Call c : calls_[part][slot]) {
            c.file = file;
            merged[part][slot].push_back(c);
          }
      continue;
    }
    const std::string path = path_of(k), ipath = path + ".calls";
    const std::uint64_t bytes = std::filesystem::file_size(path);
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_io(fmt::format("cannot open rank {}'s input recording: {}", k, std::strerror(errno)), {path});
    maps_[file] = {map_read_only(fd, bytes, path), bytes};
    ::close(fd);
    const std::vector<std::uint64_t> theirs = read_index(ipath);
    std::size_t at = 0;
    const auto next = [&] {
      if (at >= theirs.size()) throw_io(fmt::format("rank {}'s recording index is cut short", k), {ipath});
      return theirs[at++];
    };
    if (next() != in_.size()) throw_io(fmt::format("rank {}'s recording index is of other inputs", k), {ipath});
    for (int part = 0; part < 2; ++part)
      for (std::size_t slot = 0; slot < in_.size(); ++slot)
        for (std::uint64_t n = next(); n > 0; --n) {
          const std::uint64_t offset = next();
          merged[part][slot].push_back({offset, static_cast<std::int64_t>(next()), file});
        }
  }
  for (int part = 0; part < 2; ++part) calls_[part] = std::move(merged[part]);
}

const std::vector<InputRecording::Call>& InputRecording::calls(const Linear& l, RecordedPart part) const {
  const auto it = of_input_.find(input_key(l.module));
  if (it == of_input_.end())
    throw Error(ErrorKind::Internal, fmt::format("InputRecording: '{}' was not recorded", l.module));
  return calls_[static_cast<int>(part)][it->second];
}

void InputRecording::for_each_call(const Linear& l, RecordedPart part,
                                   const std::function<void(const float* x, std::int64_t rows)>& fn) const {
  for (const Call& c : calls(l, part)) fn(reinterpret_cast<const float*>(maps_[c.file].data + c.offset), c.rows);
}

std::int64_t InputRecording::rows(const Linear& l, RecordedPart part) const {
  std::int64_t n = 0;
  for (const Call& c : calls(l, part)) n += c.rows;
  return n;
}

std::vector<float> InputRecording::gather(const Linear& l, RecordedPart part) const {
  std::vector<float> out;
  out.reserve(static_cast<std::size_t>(rows(l, part) * l.in));
  for_each_call(l, part, [&](const float* x, std::int64_t n) { out.insert(out.end(), x, x + n * l.in); });
  return out;
}

void record_layer_inputs(runtime::CausalLM& model, std::int64_t layer, InputRecording& recording,
                         const std::vector<std::span<const float>>& fit,
                         const std::vector<std::span<const float>>& held_out, std::int64_t hidden_size) {
  model.set_activation_hook(&InputRecording::hook, &recording);
  std::vector<float> x;
  try {
    for (const RecordedPart part : {RecordedPart::Fit, RecordedPart::HeldOut}) {
      recording.set_part(part);
      for (const auto& h : part == RecordedPart::Fit ? fit : held_out) {
        x.assign(h.begin(), h.end());
        model.forward_layer(layer, x.data(), static_cast<std::int64_t>(h.size()) / hidden_size);
      }
    }
  } catch (...) {
    model.set_activation_hook(nullptr, nullptr);
    throw;
  }
  model.set_activation_hook(nullptr, nullptr);
  recording.finish();
}

}  // namespace selq::calibration
