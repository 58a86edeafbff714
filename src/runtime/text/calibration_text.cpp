#include "runtime/text/calibration_text.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/xxh3.h"
#include "runtime/text/text_sources.h"

namespace selq::runtime {
namespace {

namespace fs = std::filesystem;

DefaultText read_directory(const std::string& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::string t = io::read_file(f.string());
    if (t.empty()) continue;
    if (!text.empty() && text.back() != '\n') text += "\n";
    text += t;
  }
  if (text.empty()) throw_bad_input("the calibration directory holds no text", {dir});
  return {std::move(text), fmt::format("{} ({} files)", dir, files.size())};
}

DefaultText read_input(const std::string& input, std::size_t max_bytes) {
  std::error_code ec;
  if (fs::is_directory(input, ec)) return read_directory(input);
  if (fs::is_regular_file(input, ec)) return {io::read_file(input), input};
  for (const auto& s : text_sources())
    if (s.name == input) return read_text_source(input, max_bytes);
  std::string names;
  for (const auto& s : text_sources()) names += fmt::format("{}{}", names.empty() ? "" : ", ", s.name);
  throw_bad_input(fmt::format("calibration text '{}' is no file, directory or text source (the sources: {})", input,
                              names));
}

}  // namespace

const std::vector<std::string>& default_calibration_sources() {
  static const std::vector<std::string> v{"austen/sense-and-sensibility", "code/python", "manpages"};
  return v;
}

const std::vector<std::string>& held_out_sources() {
  static const std::vector<std::string> v{"foldoc", "code/cpp", "melville/moby-dick"};
  return v;
}

DefaultText mix_texts(const std::vector<DefaultText>& parts, std::size_t chunk_bytes) {
  std::vector<std::size_t> at(parts.size(), 0);
  DefaultText out;
  for (bool more = true; more;) {
    more = false;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      const std::string& t = parts[i].text;
      if (at[i] >= t.size()) continue;
      std::size_t end = std::min(t.size(), at[i] + chunk_bytes);
      if (end < t.size()) {
        const std::size_t nl = t.find('\n', end);
        end = nl == std::string::npos ? t.size() : nl + 1;
      }
      out.text.append(t, at[i], end - at[i]);
      if (out.text.back() != '\n') out.text += "\n";
      at[i] = end;
      more = true;
    }
  }
  std::string names;
  for (const auto& p : parts) names += fmt::format("{}{} [{} bytes]", names.empty() ? "" : "; ", p.source, p.text.size());
  out.source = fmt::format("a mix of {} texts in chunks of {} bytes taken in turn (xxh3 {:016x}): {}", parts.size(),
                           chunk_bytes, XXH3_64bits(out.text.data(), out.text.size()), names);
  return out;
}

DefaultText calibration_text(const std::vector<std::string>& inputs) {
  if (inputs.size() == 1) return read_input(inputs[0], kCalibrationBytesPerSource);
  std::vector<DefaultText> parts;
  for (const auto& in : inputs.empty() ? default_calibration_sources() : inputs)
    parts.push_back(read_input(in, kCalibrationBytesPerSource));
  return mix_texts(parts, kCalibrationChunkBytes);
}

}  // namespace selq::runtime
