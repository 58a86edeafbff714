#include "core/shared_library.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace selq {
namespace {

TEST(SharedLibrary, ResolvesAFunctionOfALibraryAlreadyInTheProcess) {
  // libc's SONAME on glibc systems; dlopen returns the loaded instance.
  SharedLibrary libc("libc.so.6", "this test");
  using StrlenFn = std::size_t (*)(const char*);
  auto fn = libc.function<StrlenFn>("strlen");
  EXPECT_EQ(fn("selq"), 4u);
}

TEST(SharedLibrary, AMissingLibraryIsOneIoErrorNamingItAndWhatNeedsIt) {
  try {
    SharedLibrary lib("libselq-no-such-library.so.7", "reading checkpoints over HTTP(S)");
    FAIL() << "opened a library that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_EQ(e.where().file, "libselq-no-such-library.so.7");
    EXPECT_NE(e.message().find("reading checkpoints over HTTP(S)"), std::string::npos) << e.message();
  }
}

TEST(SharedLibrary, AMissingSymbolIsAnIoErrorNamingLibraryAndSymbol) {
  SharedLibrary libc("libc.so.6", "this test");
  try {
    (void)libc.symbol("selq_no_such_symbol");
    FAIL() << "found a symbol that does not exist";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Io);
    EXPECT_NE(e.message().find("libc.so.6"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("selq_no_such_symbol"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace selq
