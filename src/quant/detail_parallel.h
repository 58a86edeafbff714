#pragma once
// Deterministic parallel row loop (see for_row_chunks in detail.h).
#include <tbb/blocked_range.h>
#include <algorithm>
#include <tbb/parallel_for.h>

#include <vector>

namespace selq::quant::detail {

template <class Body>
void for_row_chunks(std::int64_t rows, std::int64_t chunk, ErrorMetrics& total, std::vector<ErrorMetrics>* pieces,
                    Body&& body) {
  if (rows <= 0) return;
  const std::int64_t nchunks = (rows + chunk - 1) / chunk;
  std::vector<ErrorMetrics> partial(static_cast<std::size_t>(nchunks));
  // simple_partitioner with grain 1 over fixed chunks: the chunk boundaries,
  // and hence every partial sum, are the same for any thread count.
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, nchunks, 1),
      [&](const tbb::blocked_range<std::int64_t>& r) {
        for (std::int64_t c = r.begin(); c != r.end(); ++c) {
          const std::int64_t r0 = c * chunk;
          const std::int64_t r1 = std::min(rows, r0 + chunk);
          body(r0, r1, partial[static_cast<std::size_t>(c)]);
        }
      },
      tbb::simple_partitioner());
  if (pieces)
    pieces->insert(pieces->end(), partial.begin(), partial.end());
  else
    for (const auto& p : partial) total.merge(p);
}

}  // namespace selq::quant::detail
