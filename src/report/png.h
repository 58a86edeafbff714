#pragma once
// PNG pictures of the report's charts, for READMEs and issue threads: each
// standalone SVG rendered by rsvg-convert (Debian librsvg2-bin), run as a
// child process: a rasteriser is far outside what selq should hand-write.
#include <string>
#include <utility>
#include <vector>

namespace selq::report {

// Writes DIR/<name>.svg and DIR/<name>.png for each picture; returns the PNG
// paths. BadInput when rsvg-convert is not installed or fails.
std::vector<std::string> write_pngs(const std::vector<std::pair<std::string, std::string>>& pictures,
                                    const std::string& dir);

}  // namespace selq::report
