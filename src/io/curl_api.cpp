#include "io/curl_api.h"

#include "core/error.h"
#include "core/shared_library.h"

namespace selq::io {
namespace {

CurlApi load() {
  // Never closed (see ~SharedLibrary): worker threads clean up their handles
  // at thread exit, which may come after static destruction.
  static const SharedLibrary library(SELQ_CURL_SONAME, "reading checkpoints over HTTP(S)");
  CurlApi api{};
  api.global_init = library.function<decltype(api.global_init)>("curl_global_init");
  api.easy_init = library.function<decltype(api.easy_init)>("curl_easy_init");
  api.easy_cleanup = library.function<decltype(api.easy_cleanup)>("curl_easy_cleanup");
  api.easy_reset = library.function<decltype(api.easy_reset)>("curl_easy_reset");
  api.easy_setopt = library.function<decltype(api.easy_setopt)>("curl_easy_setopt");
  api.easy_perform = library.function<decltype(api.easy_perform)>("curl_easy_perform");
  api.easy_getinfo = library.function<decltype(api.easy_getinfo)>("curl_easy_getinfo");
  api.easy_strerror = library.function<decltype(api.easy_strerror)>("curl_easy_strerror");
  api.url = library.function<decltype(api.url)>("curl_url");
  api.url_cleanup = library.function<decltype(api.url_cleanup)>("curl_url_cleanup");
  api.url_set = library.function<decltype(api.url_set)>("curl_url_set");
  api.url_get = library.function<decltype(api.url_get)>("curl_url_get");
  api.free = library.function<decltype(api.free)>("curl_free");
  if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw_io("curl_global_init failed", {SELQ_CURL_SONAME});
  return api;
}

}  // namespace

const CurlApi& curl_api() {
  static const CurlApi api = load();
  return api;
}

}  // namespace selq::io
