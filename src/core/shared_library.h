#pragma once
// A shared library opened when first needed rather than at start-up.
//
// Why: libcurl (HTTPS sources) and the BLAS (the reference runtime) each pull
// in thousands of symbol relocations and, for OpenBLAS, a thread that spins
// on sched_yield for the first part of every run. Linked normally they cost
// every command ~25 ms before main() and a share of one core during
// quantize, although most commands never use them. Opening them with
// dlopen on first use keeps that cost where it is paid for.
#include <string>

namespace selq {

class SharedLibrary {
 public:
  // Opens `soname` (searched like the dynamic linker does) or throws an Io
  // error naming it and saying which feature (`needed_for`) needs it.
  SharedLibrary(std::string soname, std::string needed_for);
  ~SharedLibrary();
  SharedLibrary(const SharedLibrary&) = delete;
  SharedLibrary& operator=(const SharedLibrary&) = delete;

  // The address of `name`, or an Io error naming the library and symbol.
  void* symbol(const char* name) const;

  // Typed form: `lib.function<decltype(&curl_easy_init)>("curl_easy_init")`.
  template <typename Fn>
  Fn function(const char* name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }

 private:
  std::string soname_;
  std::string needed_for_;
  void* handle_{nullptr};
};

}  // namespace selq
