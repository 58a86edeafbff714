#pragma once
// Reads the character vectors of an R package's lazy-load database
// (data/Rdata.rdb): how Debian's r-cran-janeaustenr ships the six Austen
// novels that selq uses as its default English text. Written here because no
// C or C++ library reads R's serialization; only the subset a data package of
// character vectors uses is understood (XDR format, zlib-compressed chunks).
#include <string>
#include <vector>

namespace selq::io {

// Each chunk of the database that holds a character vector, in file order,
// one string per element (NA elements become empty strings; Latin-1 strings
// are converted to UTF-8). Chunks holding other objects are skipped. Throws
// BadInput naming the file and the chunk's byte offset when it is malformed.
std::vector<std::vector<std::string>> read_r_character_vectors(const std::string& rdb_path);

}  // namespace selq::io
