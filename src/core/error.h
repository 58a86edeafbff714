#pragma once
// selq::Error: every failure a user can cause (bad file, bad recipe, missing
// tensor, full disk) is reported through this one type, carrying where it
// happened so the CLI can print a single actionable line.
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

namespace selq {

enum class ErrorKind {
  BadInput,   // malformed file, bad recipe, missing tensor: exit code 2
  Io,         // open/read/write/fsync/rename failed (disk full included): exit code 2
  Unsupported,// a scheme/dialect combination that cannot be expressed: exit code 2
  Internal,   // a bug in selq: exit code 1
};

// What the user can give to get past the error, by idea: the library names no
// option; the CLI (cli/error_hint.cpp) and Python (selq/_errors.py) each say
// it in their own words.
enum class ErrorHint {
  None,
  ReplaceOutput,    // replace what is at the destination
  CalibrationFile,  // a calibration from `selq calibrate`
  TextFile,         // a text file instead of the default Austen text
  PromptsFile,      // prompts instead of the default Austen openings
  GgufFile,         // the demo's GGUF file
  SourceCheckpoint, // the source checkpoint's directory
  AllowNonFinite,   // quantize a weight holding NaN/Inf anyway
  Refine,           // end-to-end refinement of a planned mix
  MemoryBudget,     // the memory a run may use
};

struct ErrorWhere {
  ErrorWhere() = default;
  // A constructor (not aggregate init) so that `{file}` and `{file, tensor}`
  // compile warning-free under -Wmissing-field-initializers.
  ErrorWhere(std::string file_, std::string tensor_ = {}, std::optional<std::uint64_t> offset_ = {})
      : file(std::move(file_)), tensor(std::move(tensor_)), offset(offset_) {}

  std::string file;                  // path or URL, empty if not applicable
  std::string tensor;                // tensor name, empty if not applicable
  std::optional<std::uint64_t> offset;  // byte offset in `file`, if known
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message, ErrorWhere where = {}, ErrorHint hint = ErrorHint::None);

  ErrorKind kind() const { return kind_; }
  ErrorHint hint() const { return hint_; }
  const std::string& message() const { return message_; }
  const ErrorWhere& where() const { return where_; }
  // Exit status the CLI uses: 2 for anything the user can fix, 1 for bugs.
  int exit_code() const { return kind_ == ErrorKind::Internal ? 1 : 2; }

 private:
  ErrorKind kind_;
  std::string message_;
  ErrorWhere where_;
  ErrorHint hint_;
};

// Convenience constructors used throughout the library.
[[noreturn]] void throw_bad_input(std::string message, ErrorWhere where = {}, ErrorHint hint = ErrorHint::None);
[[noreturn]] void throw_io(std::string message, ErrorWhere where = {});
[[noreturn]] void throw_unsupported(std::string message, ErrorWhere where = {});

// Formats "file: tensor 'x' at byte N: message" (parts omitted when empty).
std::string format_error(ErrorKind kind, const std::string& message, const ErrorWhere& where);

}  // namespace selq
