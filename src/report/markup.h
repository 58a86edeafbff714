#pragma once
// Text into SVG and HTML: escaping and the number formats the pictures use.
#include <cstdint>
#include <string>

namespace selq::report {

// `s` with & < > " escaped, for element text and attribute values alike.
std::string xml_escape(const std::string& s);

// Shortest of %g with `digits` significant digits ("0.0123", "1.5e-06").
std::string short_number(double v, int digits = 3);

// Decimal sizes as the eval table prints them ("12.3 MB", "1.61 GB").
std::string decimal_bytes(std::uint64_t bytes);

}  // namespace selq::report
