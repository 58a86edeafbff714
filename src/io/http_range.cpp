#include "io/http_range.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "io/curl_api.h"

namespace selq::io {
namespace {

std::atomic<std::uint64_t> g_bytes_received{0};

struct EasyHandle {
  EasyHandle() : h(curl_api().easy_init()) {}
  ~EasyHandle() {
    if (h) curl_api().easy_cleanup(h);
  }
  CURL* h{nullptr};
};

// One handle per thread: keeps the connection alive across the many range
// requests one worker makes, without locking.
CURL* thread_handle(const std::string& url) {
  thread_local EasyHandle t;
  if (!t.h) throw_io("cannot initialise libcurl", {url});
  curl_api().easy_reset(t.h);
  return t.h;
}

struct Response {
  long status{0};
  std::string content_range;
  std::vector<std::uint8_t> body;
  // Where the body goes: `body`, or straight into the caller's buffer of
  // `cap` bytes (a growing vector re-faulted and copied every tensor).
  std::uint8_t* dst{nullptr};
  std::uint64_t received{0};  // body bytes of this response
  std::uint64_t cap{0};  // 0 = unlimited
  const std::atomic<bool>* cancel{nullptr};
  bool cancelled{false};
  bool range_request{false};
  bool aborted_status{false};  // a range request answered with something other than 206
  bool aborted_long{false};    // more bytes than asked for
  CURLcode code{CURLE_OK};
  std::string curl_error;
  std::string redirect_url;  // where a 3xx points (absolute)
  // For a 401/403's message.
  bool token_sent{false};     // HF_TOKEN went with the request
  bool hf_origin{false};      // the request was for a Hugging Face origin
  std::string host;           // the host the request was for
  std::string redirected_to;  // the host that answered, when a redirect led elsewhere
};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Who credentials are for: scheme, host and port.
struct Origin {
  std::string scheme, host, port;
  bool operator==(const Origin&) const = default;
};

// The origin as libcurl itself parses the URL: a parser of our own that read
// a URL differently could hand a token to the wrong host. nullopt if unparsable.
std::optional<Origin> origin_of(const std::string& url) {
  const CurlApi& curl = curl_api();
  const std::unique_ptr<CURLU, decltype(curl.url_cleanup)> u(curl.url(), curl.url_cleanup);
  if (!u || curl.url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return std::nullopt;
  const auto part = [&](CURLUPart what, unsigned flags) -> std::optional<std::string> {
    char* p = nullptr;
    if (curl.url_get(u.get(), what, &p, flags) != CURLUE_OK || !p) return std::nullopt;
    std::string out = lower(p);
    curl.free(p);
    return out;
  };
  auto scheme = part(CURLUPART_SCHEME, 0);
  auto host = part(CURLUPART_HOST, 0);
  auto port = part(CURLUPART_PORT, CURLU_DEFAULT_PORT);
  if (!scheme || !host || !port) return std::nullopt;
  return Origin{std::move(*scheme), std::move(*host), std::move(*port)};
}

// Where HF_TOKEN may go: huggingface.co over HTTPS, and HF_ENDPOINT (a mirror) if set.
bool is_hf_origin(const Origin& o) {
  static const std::vector<Origin> hf = [] {
    std::vector<Origin> v{{"https", "huggingface.co", "443"}};
    const char* endpoint = std::getenv("HF_ENDPOINT");
    if (endpoint && *endpoint)
      if (auto e = origin_of(endpoint)) v.push_back(std::move(*e));
    return v;
  }();
  return std::find(hf.begin(), hf.end(), o) != hf.end();
}

// What a request to one origin authenticates with: HF_TOKEN as a bearer token
// (Hugging Face origins only), or else the ~/.netrc entry for its host.
struct Credentials {
  std::string bearer;
  bool netrc{false};
};

Credentials credentials_for(const std::optional<Origin>& o) {
  if (!o) return {};
  const char* token = std::getenv("HF_TOKEN");
  if (token && *token && is_hf_origin(*o)) return {token, false};
  return {{}, true};
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  std::size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool starts_with_ci(const std::string& s, std::string_view p) {
  if (s.size() < p.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != std::tolower(static_cast<unsigned char>(p[i])))
      return false;
  return true;
}

std::size_t on_header(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::string line(data, size * n);
  // A new status line (redirect, 100-continue) starts a new response.
  if (starts_with_ci(line, "HTTP/")) {
    const auto sp = line.find(' ');
    r->status = sp == std::string::npos ? 0 : std::strtol(line.c_str() + sp + 1, nullptr, 10);
    r->content_range.clear();
  } else if (starts_with_ci(line, "content-range:")) {
    r->content_range = trim(line.substr(14));
  }
  return size * n;
}

bool is_redirect(long s) { return s == 301 || s == 302 || s == 303 || s == 307 || s == 308; }

std::size_t on_body(char* data, std::size_t size, std::size_t n, void* user) {
  auto* r = static_cast<Response*>(user);
  const std::size_t len = size * n;
  g_bytes_received += len;
  if (is_redirect(r->status)) return len;  // a redirect's body is not the file
  // Stop at once instead of downloading a whole multi-GB shard from a
  // server that ignores Range or sends more than asked.
  if (r->range_request && r->status != 206) {
    r->aborted_status = true;
    return 0;
  }
  if (r->cancel && r->cancel->load(std::memory_order_relaxed)) {
    r->cancelled = true;
    return 0;
  }
  if (r->cap && r->received + len > r->cap) {
    r->aborted_long = true;
    return 0;
  }
  if (r->dst)
    std::memcpy(r->dst + r->received, data, len);
  else
    r->body.insert(r->body.end(), data, data + len);
  r->received += len;
  return len;
}

// One HTTP exchange, redirects not followed.
Response request(const std::string& url, bool head, const std::string& range, std::uint64_t cap, std::uint8_t* dst,
                 const std::atomic<bool>* cancel, const Credentials& cred) {
  const CurlApi& curl = curl_api();
  CURL* h = thread_handle(url);
  Response r;
  r.dst = dst;
  r.cancel = cancel;
  r.cap = cap;
  r.range_request = !range.empty();
  char errbuf[CURL_ERROR_SIZE] = {0};
  const HttpPolicy& p = http_policy();
  curl.easy_setopt(h, CURLOPT_URL, url.c_str());
  curl.easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
  curl.easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl.easy_setopt(h, CURLOPT_CONNECTTIMEOUT, p.connect_timeout_s);
  curl.easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
  curl.easy_setopt(h, CURLOPT_LOW_SPEED_TIME, p.stall_timeout_s);
  curl.easy_setopt(h, CURLOPT_USERAGENT, "selq/" SELQ_VERSION);
  curl.easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
  curl.easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
  curl.easy_setopt(h, CURLOPT_HEADERDATA, &r);
  // libcurl's default 16 KiB receive buffer meant one recv and one poll per
  // ~12 KB: most of a remote run's time went to those system calls.
  curl.easy_setopt(h, CURLOPT_BUFFERSIZE, 1L << 20);
  curl.easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
  curl.easy_setopt(h, CURLOPT_WRITEDATA, &r);
  if (head) curl.easy_setopt(h, CURLOPT_NOBODY, 1L);
  if (!range.empty()) curl.easy_setopt(h, CURLOPT_RANGE, range.c_str());
  if (!cred.bearer.empty()) {
    curl.easy_setopt(h, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
    curl.easy_setopt(h, CURLOPT_XOAUTH2_BEARER, cred.bearer.c_str());
  } else if (cred.netrc) {
    curl.easy_setopt(h, CURLOPT_NETRC, static_cast<long>(CURL_NETRC_OPTIONAL));
  }
  r.code = curl.easy_perform(h);
  long status = 0;
  curl.easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
  if (status) r.status = status;
  char* location = nullptr;
  if (is_redirect(r.status) && curl.easy_getinfo(h, CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location)
    r.redirect_url = location;
  r.curl_error = errbuf[0] ? errbuf : curl.easy_strerror(r.code);
  return r;
}

constexpr int kMaxRedirects = 5;

// A request, following redirects here rather than in libcurl: credentials go
// with a hop only while it stays on the origin of `url` (Hugging Face answers
// 302 to its CDN, which must never see the token), whatever libcurl version.
Response perform(const std::string& url, bool head, const std::string& range, std::uint64_t cap,
                 std::uint8_t* dst = nullptr, const std::atomic<bool>* cancel = nullptr) {
  const std::optional<Origin> origin = origin_of(url);
  const Credentials cred = credentials_for(origin);
  std::string at = url;
  for (int hop = 0;; ++hop) {
    const std::optional<Origin> here = hop == 0 ? origin : origin_of(at);
    const bool home = here && here == origin;
    Response r = request(at, head, range, cap, dst, cancel, home ? cred : Credentials{});
    if (!is_redirect(r.status) || r.redirect_url.empty()) {
      r.token_sent = !cred.bearer.empty();
      r.hf_origin = origin && is_hf_origin(*origin);
      r.host = origin ? origin->host : url;
      if (hop > 0 && !home) r.redirected_to = here ? here->host : at;
      return r;
    }
    if (hop == kMaxRedirects) throw_io(fmt::format("more than {} redirects", kMaxRedirects), {url});
    at = std::move(r.redirect_url);
  }
}

// What to do about a 401 or 403 (never the token itself).
std::string denied_advice(const Response& r) {
  if (r.status == 401) {
    if (r.token_sent) return "the token was refused: check HF_TOKEN";
    if (r.hf_origin) return "needs a token: set HF_TOKEN (or check the repository name)";
    return fmt::format("needs credentials (a ~/.netrc entry for {})", r.host);
  }
  if (r.token_sent) return "the token was refused or lacks access to this repository";
  return r.hf_origin ? "access refused: set HF_TOKEN to a token with access to this repository" : "access refused";
}

// A 401 or 403 is final (no retry) and one line saying what to do.
void throw_if_denied(const Response& r, const ErrorWhere& where) {
  if (r.status != 401 && r.status != 403) return;
  std::string message = fmt::format("HTTP {}: {}", r.status, denied_advice(r));
  if (!r.redirected_to.empty()) message += fmt::format(" (answered by {} after a redirect)", r.redirected_to);
  throw_io(message, where);
}

bool transient_status(long s) { return s == 408 || s == 429 || (s >= 500 && s <= 599); }

bool transient_curl(CURLcode c) {
  switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
      return true;
    default:
      return false;
  }
}

void backoff(int attempt) {
  const HttpPolicy& p = http_policy();
  long ms = p.backoff_first_ms;
  for (int i = 0; i < attempt && ms < p.backoff_max_ms; ++i) ms *= 2;
  std::this_thread::sleep_for(std::chrono::milliseconds(std::min(ms, p.backoff_max_ms)));
}

// "bytes A-B/TOTAL" ("*" total allowed).
bool parse_content_range(const std::string& s, std::uint64_t& a, std::uint64_t& b, std::optional<std::uint64_t>& total) {
  unsigned long long x = 0, y = 0;
  char tot[32] = {0};
  if (std::sscanf(s.c_str(), "bytes %llu-%llu/%31s", &x, &y, tot) != 3) return false;
  a = x;
  b = y;
  if (std::string(tot) != "*") {
    char* end = nullptr;
    const unsigned long long t = std::strtoull(tot, &end, 10);
    if (!end || *end) return false;
    total = t;
  }
  return true;
}

}  // namespace

const HttpPolicy& http_policy() {
  static const HttpPolicy p = [] {
    HttpPolicy q;
    if (const char* e = std::getenv("SELQ_HTTP_ATTEMPTS")) q.attempts = std::max(1, std::atoi(e));
    return q;
  }();
  return p;
}

bool is_http_url(const std::string& s) { return starts_with_ci(s, "http://") || starts_with_ci(s, "https://"); }

std::string url_join(const std::string& base, const std::string& relative) {
  std::string out = base;
  while (!out.empty() && out.back() == '/') out.pop_back();
  out += '/';
  for (unsigned char c : relative) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out;
}

std::uint64_t http_bytes_received() { return g_bytes_received.load(); }

std::vector<std::uint8_t> http_get_range(const std::string& url, std::uint64_t offset, std::uint64_t length,
                                         const std::string& tensor, std::uint64_t* total_size) {
  std::vector<std::uint8_t> out(length);
  http_get_range_into(url, offset, out, tensor, total_size);
  return out;
}

void http_get_range_into(const std::string& url, std::uint64_t offset, std::span<std::uint8_t> dst,
                         const std::string& tensor, std::uint64_t* total_size, const std::atomic<bool>* cancel) {
  const std::uint64_t length = dst.size();
  std::uint64_t done = 0;
  const int attempts = http_policy().attempts;
  std::string last_problem;
  for (int attempt = 0; done < length; ++attempt) {
    if (cancel && cancel->load()) throw_io("download cancelled", {url, tensor, offset + done});
    if (attempt >= attempts)
      throw_io(fmt::format("download failed after {} attempts ({} of {} bytes received): {}", attempts, done,
                           length, last_problem),
               {url, tensor, offset});
    if (attempt > 0) backoff(attempt - 1);
    // Resume where the previous try stopped.
    const std::uint64_t off = offset + done;
    const std::uint64_t want = length - done;
    const std::string range = fmt::format("{}-{}", off, off + want - 1);
    // A 206 body is written into `dst` as it arrives (nothing else is).
    Response r = perform(url, false, range, want, dst.data() + done, cancel);
    done += r.received;
    const ErrorWhere where{url, tensor, off};
    if (r.cancelled) throw_io("download cancelled", where);
    throw_if_denied(r, where);
    if (r.status == 404 || r.status == 410) throw_io(fmt::format("not found (HTTP {})", r.status), where);
    if (r.status == 200)
      throw_unsupported(
            fmt::format("server ignores HTTP Range requests (answered 200 to 'Range: bytes={}'); remote "
                        "checkpoints need a server with range support",
                        range),
            where);
    if (r.status == 416) throw_bad_input(fmt::format("range bytes={} is outside the file (HTTP 416)", range), where);
    if (r.status != 0 && r.status != 206) {
      if (transient_status(r.status)) {
        last_problem = fmt::format("HTTP {}", r.status);
        continue;
      }
      throw_io(fmt::format("unexpected HTTP status {} for bytes={}", r.status, range), where);
    }
    if (r.status == 0) {  // no response at all (connection refused, timeout, ...)
      if (transient_curl(r.code)) {
        last_problem = r.curl_error;
        continue;
      }
      throw_io(fmt::format("request failed: {}", r.curl_error), where);
    }
    // 206: the bytes must be exactly the ones asked for.
    std::uint64_t a = 0, b = 0;
    std::optional<std::uint64_t> total;
    if (!parse_content_range(r.content_range, a, b, total))
      throw_bad_input(fmt::format("206 response without a valid Content-Range (got '{}') for bytes={}",
                                  r.content_range, range),
                      where);
    if (a != off || b != off + want - 1)
      throw_bad_input(fmt::format("wrong Content-Range '{}' for requested bytes={}", r.content_range, range), where);
    if (total && total_size) *total_size = *total;
    if (r.aborted_long)
      throw_bad_input(fmt::format("response is longer than the {} bytes requested (bytes={})", want, range), where);
    if (r.code == CURLE_OK && r.received < want)
      throw_bad_input(fmt::format("wrong-length response: {} bytes for bytes={} ({} requested)", r.received, range,
                                  want),
                      where);
    if (r.code != CURLE_OK) {
      if (!transient_curl(r.code)) throw_io(fmt::format("request failed: {}", r.curl_error), where);
      last_problem = fmt::format("transfer cut short at byte {}: {}", offset + done, r.curl_error);
    }
  }
}

std::optional<std::string> http_get_file(const std::string& url, bool missing_ok) {
  const int attempts = http_policy().attempts;
  std::string last_problem;
  for (int attempt = 0;; ++attempt) {
    if (attempt >= attempts)
      throw_io(fmt::format("download failed after {} attempts: {}", attempts, last_problem), {url});
    if (attempt > 0) backoff(attempt - 1);
    Response r = perform(url, false, "", 0);
    throw_if_denied(r, {url});
    if ((r.status == 404 || r.status == 410) && missing_ok) return std::nullopt;
    if (r.status == 404 || r.status == 410) throw_io(fmt::format("not found (HTTP {})", r.status), {url});
    if (transient_status(r.status) || (r.code != CURLE_OK && transient_curl(r.code))) {
      last_problem = r.code != CURLE_OK ? r.curl_error : fmt::format("HTTP {}", r.status);
      continue;
    }
    if (r.code != CURLE_OK) throw_io(fmt::format("request failed: {}", r.curl_error), {url});
    if (r.status != 200) throw_io(fmt::format("unexpected HTTP status {}", r.status), {url});
    return std::string(r.body.begin(), r.body.end());
  }
}

bool http_exists(const std::string& url) {
  const int attempts = http_policy().attempts;
  std::string last_problem;
  for (int attempt = 0;; ++attempt) {
    if (attempt >= attempts)
      throw_io(fmt::format("HEAD failed after {} attempts: {}", attempts, last_problem), {url});
    if (attempt > 0) backoff(attempt - 1);
    Response r = perform(url, true, "", 0);
    throw_if_denied(r, {url});
    if (r.status == 404 || r.status == 410) return false;
    if (transient_status(r.status) || (r.code != CURLE_OK && transient_curl(r.code))) {
      last_problem = r.code != CURLE_OK ? r.curl_error : fmt::format("HTTP {}", r.status);
      continue;
    }
    if (r.code != CURLE_OK) throw_io(fmt::format("request failed: {}", r.curl_error), {url});
    if (r.status >= 200 && r.status < 300) return true;
    throw_io(fmt::format("unexpected HTTP status {} for HEAD", r.status), {url});
  }
}

}  // namespace selq::io
