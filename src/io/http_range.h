#pragma once
// HTTP(S) access to a remote checkpoint: whole small files (index, config,
// tokenizer) and byte ranges of shards (headers, tensors), over libcurl.
// Thread-safe: each thread reuses its own easy handle (keep-alive).
// Every failure is a selq::Error naming the URL and, where given, the tensor
// and byte offset.
#include <atomic>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace selq::io {

// True for "http://..." and "https://..." (case-insensitive scheme).
bool is_http_url(const std::string& s);
// base + "/" + relative path, each path component percent-encoded.
std::string url_join(const std::string& base, const std::string& relative);

struct HttpPolicy {
  int attempts = 5;                 // total tries per request (transient failures only)
  long backoff_first_ms = 100;      // doubled after each failed try
  long backoff_max_ms = 4000;
  long connect_timeout_s = 15;
  // A transfer slower than 1 KB/s for this long is abandoned (and retried).
  long stall_timeout_s = 30;
};
// Process-wide policy; the environment variable SELQ_HTTP_ATTEMPTS overrides `attempts`.
const HttpPolicy& http_policy();

// Bytes [offset, offset + length) of `url`. The server must answer 206 with a
// matching Content-Range; a transfer cut short resumes from the last byte
// received. `total_size`, if given, receives the full file size from
// Content-Range. `tensor` only labels errors.
std::vector<std::uint8_t> http_get_range(const std::string& url, std::uint64_t offset, std::uint64_t length,
                                         const std::string& tensor = {}, std::uint64_t* total_size = nullptr);
// The same into the caller's buffer (dst.size() bytes from `offset`): a
// reused buffer is not faulted and zeroed again for every tensor. A set
// `cancel` stops the transfer and throws (a pipeline that failed elsewhere).
void http_get_range_into(const std::string& url, std::uint64_t offset, std::span<std::uint8_t> dst,
                         const std::string& tensor = {}, std::uint64_t* total_size = nullptr,
                         const std::atomic<bool>* cancel = nullptr);
// The whole body; nullopt on 404/410 when `missing_ok`, an error otherwise.
std::optional<std::string> http_get_file(const std::string& url, bool missing_ok);
// HEAD: true on 2xx, false on 404/410, an error on anything else.
bool http_exists(const std::string& url);
// Body bytes received over HTTP by this process (for tests and reports).
std::uint64_t http_bytes_received();

}  // namespace selq::io
