#pragma once
// The calibration text (docs/RECIPES.md, "Calibration text"). By default a mix
// of domains from installed packages, so that what is fitted to it (GPTQ,
// static activation scales, the planner's measured tiers) holds on text of
// other domains: prose (Austen's Sense and Sensibility), code (the Python
// standard library) and technical prose (Linux man-pages), in chunks taken in
// turn, the same bytes on every machine with the same packages. A user's
// files, directories and text source names (runtime/text/text_sources.h) are mixed
// the same way; one file alone is read whole, as it is.
#include <cstddef>
#include <string>
#include <vector>

#include "runtime/text/default_text.h"

namespace selq::runtime {

// The default mix's sources, in the order their chunks are taken.
const std::vector<std::string>& default_calibration_sources();
// Sources of other domains and authors than the mix's, held out of it for
// evaluation (the tests and bench/rounding/domains.sh read them from `selq text --json`).
const std::vector<std::string>& held_out_sources();

// Bytes read from each source of a mix (enough for 8192 tokens of each: about
// 90,000 tokens in all, past `--calibration-tokens`' defaults and QUALITY.md's 32768).
inline constexpr std::size_t kCalibrationBytesPerSource = 128 * 1024;
// A chunk: about one 512-token calibration sequence of prose.
inline constexpr std::size_t kCalibrationChunkBytes = 2048;

// The text for `inputs` (empty: the default mix). An input is a file, a
// directory (its regular files, recursively, in path order, as one text) or a
// text source name. BadInput names an input that is none of these.
DefaultText calibration_text(const std::vector<std::string>& inputs);

// `parts` interleaved: a chunk of about `chunk_bytes` (cut after a line end)
// from each part in turn until every part is used up. The source names each
// part with its bytes and the mix's XXH3.
DefaultText mix_texts(const std::vector<DefaultText>& parts, std::size_t chunk_bytes);

}  // namespace selq::runtime
