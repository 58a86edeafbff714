// Highway's run-time dispatch (HWY_DYNAMIC_DISPATCH, hwy::SupportedTargets)
// calls three functions of libhwy.so. They are defined here, forwarding to the
// library, which a thread started before main() opens with dlopen.
//
// Why: libhwy 1.0.3 (Debian 12) calibrates a timer in a static initializer
// (hwy::platform::TimerResolution; made lazy upstream in google/highway#2440),
// which linked normally cost every command ~7 ms before main() on the 2-core
// VM: an empty program linked with libhwy takes 8.0 ms to run against 0.8 ms.
// Opened on a thread, the calibration runs on another core while the command
// parses its arguments, reads the recipe and plans; the first kernel waits
// for the library only if it is not open yet.
#include <cstdint>
#include <future>

#include <hwy/targets.h>

#include "core/shared_library.h"

namespace selq {
namespace {

struct HwyFunctions {
  std::int64_t (*supported_targets)();
  hwy::ChosenTarget& (*get_chosen_target)();
  void (*set_supported_targets_for_test)(std::int64_t);
};

HwyFunctions open_hwy() {
  // Never closed (see ~SharedLibrary).
  static const SharedLibrary library(SELQ_HWY_SONAME, "SIMD kernel dispatch");
  // The C++ names as the library exports them (namespace hwy, int64_t = long).
  return {library.function<decltype(HwyFunctions::supported_targets)>("_ZN3hwy16SupportedTargetsEv"),
          library.function<decltype(HwyFunctions::get_chosen_target)>("_ZN3hwy15GetChosenTargetEv"),
          library.function<decltype(HwyFunctions::set_supported_targets_for_test)>(
              "_ZN3hwy26SetSupportedTargetsForTestEl")};
}

const std::shared_future<HwyFunctions>& opening() {
  static const std::shared_future<HwyFunctions> f = std::async(std::launch::async, open_hwy).share();
  return f;
}

// Starts opening it as the program starts (static initialization).
[[maybe_unused]] const bool kOpeningStarted = (opening(), true);

// Waits for the library if need be; rethrows a failure to open it (an Io
// error naming the library). Every kernel dispatch asks, so the answer is kept
// in a static: shared_future::get() goes through std::call_once each time
// (0.6% of an NVFP4 run).
const HwyFunctions& hwy_functions() {
  static const HwyFunctions& functions = opening().get();
  return functions;
}

}  // namespace
}  // namespace selq

namespace hwy {

std::int64_t SupportedTargets() { return selq::hwy_functions().supported_targets(); }
ChosenTarget& GetChosenTarget() { return selq::hwy_functions().get_chosen_target(); }
void SetSupportedTargetsForTest(std::int64_t targets) {
  selq::hwy_functions().set_supported_targets_for_test(targets);
}

}  // namespace hwy
