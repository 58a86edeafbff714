#include "cli/progress_bar.h"

#include <cstdio>

#include <fmt/format.h>

namespace selq::cli {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) { b /= 1024.0; ++u; }
  return fmt::format("{:.1f} {}", b, units[u]);
}

ProgressBar::ProgressBar(std::string label, bool enabled, Unit unit, Style style)
    : label_(std::move(label)),
      enabled_(enabled),
      unit_(unit),
      style_(style),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void ProgressBar::update(std::uint64_t done, std::uint64_t total, const std::string& detail) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (style_ == Style::Lines) {
    if (done < total && now - last_ < std::chrono::seconds(kLineSeconds)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double left = done ? secs * static_cast<double>(total - done) / static_cast<double>(done) : 0.0;
    fmt::print(stderr, "{}: {}/{} ({:.0f}%), {:.0f} s so far, about {:.0f} s left{}{}\n", label_, done, total,
               total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0, secs, left,
               detail.empty() ? "" : "; ", detail);
    std::fflush(stderr);
    return;
  }
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double frac = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(frac * kWidth);
  auto amount = [&](double v) { return unit_ == Unit::Bytes ? human_bytes(v) : fmt::format("{:.0f}", v); };
  const std::string per_s = unit_ == Unit::Bytes ? human_bytes(rate) : fmt::format("{:.2f}", rate);
  fmt::print(stderr, "\r{} [{}{}] {:5.1f}% {}/{} {}/s ETA {:.0f}s {}\033[K", label_, std::string(filled, '#'),
             std::string(kWidth - filled, ' '), 100.0 * frac, amount(static_cast<double>(done)),
             amount(static_cast<double>(total)), per_s, eta, detail);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && drawn_ && style_ == Style::Bar) fmt::print(stderr, "\n");
  drawn_ = false;
}

}  // namespace selq::cli
