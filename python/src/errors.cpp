// selq::Error -> the selq.Error hierarchy (python/selq/_errors.py), with the
// error's file, tensor and byte offset as attributes.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "core/error.h"

namespace nb = nanobind;

namespace selq::python {
namespace {

const char* kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::BadInput: return "BadInput";
    case ErrorKind::Io: return "Io";
    case ErrorKind::Unsupported: return "Unsupported";
    case ErrorKind::Internal: return "Internal";
  }
  return "Internal";
}

const char* hint_name(ErrorHint h) {
  switch (h) {
    case ErrorHint::None: return "";
    case ErrorHint::ReplaceOutput: return "ReplaceOutput";
    case ErrorHint::CalibrationFile: return "CalibrationFile";
    case ErrorHint::TextFile: return "TextFile";
    case ErrorHint::PromptsFile: return "PromptsFile";
    case ErrorHint::GgufFile: return "GgufFile";
    case ErrorHint::SourceCheckpoint: return "SourceCheckpoint";
    case ErrorHint::AllowNonFinite: return "AllowNonFinite";
    case ErrorHint::Refine: return "Refine";
    case ErrorHint::MemoryBudget: return "MemoryBudget";
  }
  return "";
}

void raise_python(const char* kind, const std::string& message, const ErrorWhere& where, const std::string& text,
                  ErrorHint hint = ErrorHint::None) {
  nb::object make = nb::module_::import_("selq._errors").attr("_from_core");
  nb::object exc = make(kind, message, where.file, where.tensor, where.offset, text, hint_name(hint));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

}  // namespace

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const Error& e) {
      raise_python(kind_name(e.kind()), e.message(), e.where(), e.what(), e.hint());
    } catch (const nb::python_error&) {
      throw;  // already a Python exception
    } catch (const std::bad_alloc&) {
      throw;  // nanobind's own translator: MemoryError
    } catch (const std::exception& e) {
      // A library exception that is not a selq::Error is a bug in selq.
      raise_python("Internal", e.what(), {}, e.what());
    }
  });
}

}  // namespace selq::python
