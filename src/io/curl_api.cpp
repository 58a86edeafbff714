#include "io/curl_api.h"

#include "core/error.h"
#include "core/shared_library.h"

namespace selq::io {
namespace {

CurlApi load() {
  // Leaked on purpose: the handles of worker threads are cleaned up at
  // thread exit, which may come after static destruction.
  static const auto* lib = new SharedLibrary(SELQ_CURL_SONAME, "reading checkpoints over HTTP(S)");
  CurlApi api{};
  api.global_init = lib->function<decltype(api.global_init)>("curl_global_init");
  api.easy_init = lib->function<decltype(api.easy_init)>("curl_easy_init");
  api.easy_cleanup = lib->function<decltype(api.easy_cleanup)>("curl_easy_cleanup");
  api.easy_reset = lib->function<decltype(api.easy_reset)>("curl_easy_reset");
  api.easy_setopt = lib->function<decltype(api.easy_setopt)>("curl_easy_setopt");
  api.easy_perform = lib->function<decltype(api.easy_perform)>("curl_easy_perform");
  api.easy_getinfo = lib->function<decltype(api.easy_getinfo)>("curl_easy_getinfo");
  api.easy_strerror = lib->function<decltype(api.easy_strerror)>("curl_easy_strerror");
  if (api.global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw_io("curl_global_init failed", {SELQ_CURL_SONAME});
  return api;
}

}  // namespace

const CurlApi& curl_api() {
  static const CurlApi api = load();
  return api;
}

}  // namespace selq::io
