#include "core/error.h"

#include <fmt/format.h>

namespace selq {

std::string format_error(ErrorKind, const std::string& message, const ErrorWhere& where) {
  std::string out;
  if (!where.file.empty()) out += where.file + ": ";
  if (!where.tensor.empty()) out += fmt::format("tensor '{}': ", where.tensor);
  if (where.offset) out += fmt::format("at byte {}: ", *where.offset);
  out += message;
  return out;
}

Error::Error(ErrorKind kind, std::string message, ErrorWhere where, ErrorHint hint)
    : std::runtime_error(format_error(kind, message, where)),
      kind_(kind),
      message_(std::move(message)),
      where_(std::move(where)),
      hint_(hint) {}

void throw_bad_input(std::string message, ErrorWhere where, ErrorHint hint) {
  throw Error(ErrorKind::BadInput, std::move(message), std::move(where), hint);
}
void throw_io(std::string message, ErrorWhere where) {
  throw Error(ErrorKind::Io, std::move(message), std::move(where));
}
void throw_unsupported(std::string message, ErrorWhere where) {
  throw Error(ErrorKind::Unsupported, std::move(message), std::move(where));
}

}  // namespace selq
