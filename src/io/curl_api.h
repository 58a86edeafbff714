#pragma once
// The libcurl functions selq uses, resolved from libcurl on first use (see
// core/shared_library.h for why it is not linked at start-up). Only the
// HTTPS source needs it; local runs never load it.
#include <curl/curl.h>

namespace selq::io {

struct CurlApi {
  decltype(&curl_global_init) global_init;
  decltype(&curl_easy_init) easy_init;
  decltype(&curl_easy_cleanup) easy_cleanup;
  decltype(&curl_easy_reset) easy_reset;
  decltype(&curl_easy_setopt) easy_setopt;
  decltype(&curl_easy_perform) easy_perform;
  decltype(&curl_easy_getinfo) easy_getinfo;
  decltype(&curl_easy_strerror) easy_strerror;
  // The URL API: which scheme, host and port a URL names (who gets credentials).
  decltype(&curl_url) url;
  decltype(&curl_url_cleanup) url_cleanup;
  decltype(&curl_url_set) url_set;
  decltype(&curl_url_get) url_get;
  decltype(&curl_free) free;
};

// Loads libcurl (SELQ_CURL_SONAME, found at configure time) and runs
// curl_global_init once; thread-safe. Throws an Io error if it cannot.
const CurlApi& curl_api();

}  // namespace selq::io
