#include "calibration/input_recording.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "calibration/input_hessians.h"
#include "core/error.h"

namespace selq::calibration {

using runtime::Linear;

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
  if (map_) ::munmap(const_cast<std::uint8_t*>(map_), written_);
  if (fd_ >= 0) ::close(fd_);
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void InputRecording::hook(void* ctx, const Linear& l, const float* x, std::int64_t rows) {
  auto& self = *static_cast<InputRecording*>(ctx);
  const auto it = self.slot_.find(&l);
  if (it == self.slot_.end() || rows == 0) return;
  const auto* p = reinterpret_cast<const char*>(x);
  std::size_t left = static_cast<std::size_t>(rows * l.in) * sizeof(float);
  self.calls_[static_cast<int>(self.part_)][it->second].push_back({self.written_, rows});
  while (left > 0) {
    const ssize_t n = ::write(self.fd_, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw_io(fmt::format("cannot write the layer's input recording ({} bytes so far): {}", self.written_,
                           n < 0 ? std::strerror(errno) : "no progress"),
               {self.path_});
    p += n;
    left -= static_cast<std::size_t>(n);
    self.written_ += static_cast<std::uint64_t>(n);
  }
}

void InputRecording::finish() {
  if (written_ == 0) return;
  void* p = ::mmap(nullptr, written_, PROT_READ, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) throw_io(fmt::format("cannot map the layer's input recording: {}", std::strerror(errno)), {path_});
  ::madvise(p, written_, MADV_SEQUENTIAL);
  map_ = static_cast<const std::uint8_t*>(p);
}

const std::vector<InputRecording::Call>& InputRecording::calls(const Linear& l, RecordedPart part) const {
  const auto it = of_input_.find(input_key(l.module));
  if (it == of_input_.end())
    throw Error(ErrorKind::Internal, fmt::format("InputRecording: '{}' was not recorded", l.module));
  return calls_[static_cast<int>(part)][it->second];
}

void InputRecording::for_each_call(const Linear& l, RecordedPart part,
                                   const std::function<void(const float* x, std::int64_t rows)>& fn) const {
  for (const Call& c : calls(l, part)) fn(reinterpret_cast<const float*>(map_ + c.offset), c.rows);
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
