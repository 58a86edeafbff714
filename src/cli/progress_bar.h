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
  // Bar: one line redrawn in place (a terminal). Lines: a plain line every
  // kLineSeconds and at the end, for logs (a long run under CI or nohup).
  enum class Style { Bar, Lines };
  static constexpr int kLineSeconds = 30;
  ProgressBar(std::string label, bool enabled, Unit unit = Unit::Bytes, Style style = Style::Bar);
  void update(std::uint64_t done, std::uint64_t total, const std::string& detail = {});
  void finish();

 private:
  std::string label_;
  bool enabled_;
  Unit unit_;
  Style style_;
  bool drawn_{false};
  std::chrono::steady_clock::time_point start_, last_;
};

std::string human_bytes(double b);

}  // namespace selq::cli
