#pragma once
// A one-line progress bar on stderr (bytes or counts, rate, ETA), drawn only
// when stderr is a terminal and not --quiet; redrawn at most 10 times a second.
#include <chrono>
#include <cstdint>
#include <string>

namespace selq::cli {

class ProgressBar {
 public:
  enum class Unit { Bytes, Count };
  ProgressBar(std::string label, bool enabled, Unit unit = Unit::Bytes);
  void update(std::uint64_t done, std::uint64_t total, const std::string& detail = {});
  void finish();

 private:
  std::string label_;
  bool enabled_;
  Unit unit_;
  bool drawn_{false};
  std::chrono::steady_clock::time_point start_, last_;
};

std::string human_bytes(double b);

}  // namespace selq::cli
