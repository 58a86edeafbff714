#pragma once
// The CLI's words for an error's hint (core/error.h: the library names no
// option; Python words its own in selq/_errors.py).
#include <string>

#include "core/error.h"

namespace selq::cli {

// " (--force replaces it)" and the like, appended to the error line; empty for ErrorHint::None.
std::string hint_suffix(ErrorHint hint);

}  // namespace selq::cli
