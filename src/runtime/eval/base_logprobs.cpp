#include "runtime/eval/base_logprobs.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_hash.h"
#include "io/xxh3.h"

namespace selq::runtime {

namespace fs = std::filesystem;
static_assert(std::endian::native == std::endian::little, "the cache file is little-endian, written as in memory");

namespace {
constexpr char kMagic[8] = {'S', 'E', 'L', 'Q', 'B', 'L', 'P', '1'};
constexpr float kFloor = -40.0f;
constexpr float kLevels = 65535.0f;
}  // namespace

BaseLogProbs::BaseLogProbs(std::int64_t rows, std::int64_t vocab)
    : vocab_(vocab), heads_(static_cast<std::size_t>(rows)), codes_(static_cast<std::size_t>(rows * vocab)) {}

void BaseLogProbs::set_row(std::int64_t row, const float* logp, std::int32_t target) {
  RowHead& h = heads_[static_cast<std::size_t>(row)];
  const float* mx = std::max_element(logp, logp + vocab_);
  h.top = static_cast<std::int32_t>(mx - logp);
  h.target_logp = logp[target];
  h.lo = std::max(kFloor, std::min(*std::min_element(logp, logp + vocab_), -1e-6f));
  h.step = -h.lo / kLevels;
  std::uint16_t* c = codes_.data() + row * vocab_;
  for (std::int64_t i = 0; i < vocab_; ++i) {
    const float q = std::nearbyint((std::clamp(logp[i], h.lo, 0.0f) - h.lo) / h.step);
    c[i] = static_cast<std::uint16_t>(std::clamp(q, 0.0f, kLevels));
  }
}

void BaseLogProbs::decode_row(std::int64_t row, float* out) const {
  const RowHead& h = heads_[static_cast<std::size_t>(row)];
  const std::uint16_t* c = codes_.data() + row * vocab_;
  double sum = 0;
  for (std::int64_t i = 0; i < vocab_; ++i) {
    out[i] = h.lo + static_cast<float>(c[i]) * h.step;
    sum += std::exp(static_cast<double>(out[i]));
  }
  const auto log_sum = static_cast<float>(std::log(sum));
  for (std::int64_t i = 0; i < vocab_; ++i) out[i] -= log_sum;
}

void BaseLogProbs::save(const std::string& path, const std::string& key) const {
  const std::string header =
      nlohmann::json{{"format", "selq-base-logprobs-v1"}, {"key", key}, {"rows", rows()}, {"vocab", vocab_}}.dump();
  const std::uint64_t hlen = header.size();
  auto bytes = [](const auto& v) {
    return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
  };
  const std::string_view pieces[] = {std::string_view(kMagic, sizeof kMagic),
                                     std::string_view(reinterpret_cast<const char*>(&hlen), sizeof hlen), header,
                                     bytes(heads_), bytes(codes_)};
  io::write_file_atomic(path, pieces);
}

std::optional<BaseLogProbs> BaseLogProbs::load(const std::string& path, const std::string& key) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  char magic[sizeof kMagic];
  std::uint64_t hlen = 0;
  if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) return std::nullopt;
  if (!in.read(reinterpret_cast<char*>(&hlen), sizeof hlen) || hlen > (1u << 20)) return std::nullopt;
  std::string header(hlen, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(hlen))) return std::nullopt;
  const auto j = nlohmann::json::parse(header, nullptr, false);
  if (!j.is_object() || j.value("key", "") != key || !j.contains("rows") || !j.contains("vocab")) return std::nullopt;
  const auto rows = j["rows"].get<std::int64_t>();
  const auto vocab = j["vocab"].get<std::int64_t>();
  std::error_code ec;
  const std::uint64_t expect = sizeof kMagic + sizeof hlen + hlen + static_cast<std::uint64_t>(rows) * sizeof(RowHead) +
                               static_cast<std::uint64_t>(rows * vocab) * sizeof(std::uint16_t);
  if (rows < 0 || vocab <= 0 || fs::file_size(path, ec) != expect) return std::nullopt;
  BaseLogProbs b(rows, vocab);
  in.read(reinterpret_cast<char*>(b.heads_.data()), static_cast<std::streamsize>(b.heads_.size() * sizeof(RowHead)));
  in.read(reinterpret_cast<char*>(b.codes_.data()), static_cast<std::streamsize>(b.codes_.size() * sizeof(std::uint16_t)));
  if (!in) return std::nullopt;
  return b;
}

std::string base_logprobs_key(const std::string& base_dir, const std::vector<std::int32_t>& tokens,
                              std::int64_t context) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(base_dir))
    if (e.is_regular_file() && (e.path().extension() == ".safetensors" || e.path().filename() == "config.json"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  auto add = [&](const void* p, std::size_t n) { XXH3_64bits_update(st, p, n); };
  for (const auto& f : files) {
    const std::string name = f.filename().string();
    add(name.data(), name.size() + 1);
    std::uint64_t h = 0;
    if (f.extension() == ".safetensors") {
      auto ch = io::file_content_hash(f.string());
      if (!ch) {
        XXH3_freeState(st);
        throw_bad_input(fmt::format("{}: not a valid safetensors file", f.string()));
      }
      h = *ch;
    } else {
      const std::string c = io::read_file(f.string());
      h = XXH3_64bits(c.data(), c.size());
    }
    add(&h, sizeof h);
  }
  const std::uint64_t model = XXH3_64bits_digest(st);
  XXH3_64bits_reset(st);
  add(&context, sizeof context);
  add(tokens.data(), tokens.size() * sizeof(std::int32_t));
  const std::uint64_t text = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}-{:016x}-{}", model, text, tokens.size());
}

std::string default_base_logprobs_dir() {
  if (const char* d = std::getenv("SELQ_CACHE_DIR"); d && *d) return (fs::path(d) / "base-logprobs").string();
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return (fs::path(d) / "selq" / "base-logprobs").string();
  if (const char* d = std::getenv("HOME"); d && *d) return (fs::path(d) / ".cache" / "selq" / "base-logprobs").string();
  return "";
}

void prune_base_logprobs(const std::string& dir, std::uint64_t max_bytes) {
  std::error_code ec;
  std::vector<std::pair<fs::file_time_type, fs::path>> files;
  std::uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().extension() != ".blp") continue;
    files.push_back({e.last_write_time(ec), e.path()});
    total += e.file_size(ec);
  }
  std::sort(files.begin(), files.end());
  for (const auto& [t, p] : files) {
    if (total <= max_bytes) break;
    const std::uint64_t n = fs::file_size(p, ec);
    if (fs::remove(p, ec)) total -= std::min(total, n);
  }
}

}  // namespace selq::runtime
