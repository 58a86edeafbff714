#include "core/shared_library.h"

#include <dlfcn.h>

#include <fmt/format.h>

#include "core/error.h"

namespace selq {

SharedLibrary::SharedLibrary(std::string soname, std::string needed_for)
    : soname_(std::move(soname)), needed_for_(std::move(needed_for)) {
  // RTLD_LOCAL: the library's symbols serve only the lookups made here.
  handle_ = ::dlopen(soname_.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle_) {
    const char* why = ::dlerror();
    throw_io(fmt::format("cannot load {} (needed for {}): {}", soname_, needed_for_, why ? why : "unknown error"),
             {soname_});
  }
}

SharedLibrary::~SharedLibrary() {
  // Deliberately not dlclose'd: libraries that start threads or register
  // atexit handlers (OpenBLAS, libcurl's TLS back ends) must outlive them.
}

void* SharedLibrary::symbol(const char* name) const {
  ::dlerror();
  void* p = ::dlsym(handle_, name);
  if (!p) {
    const char* why = ::dlerror();
    throw_io(fmt::format("{} has no symbol {} (needed for {}){}{}", soname_, name, needed_for_, why ? ": " : "",
                         why ? why : ""),
             {soname_});
  }
  return p;
}

}  // namespace selq
