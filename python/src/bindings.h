#pragma once
// The pieces of the `selq._selq` extension. Everything it does is a call into
// the selq libraries (src/); JSON results travel as text and are parsed by
// the Python layer (python/selq), which gives the public API its shape.
#include <nanobind/nanobind.h>

namespace selq::python {

void bind_errors(nanobind::module_& m);
void bind_pipeline(nanobind::module_& m);
void bind_tensor(nanobind::module_& m);
void bind_serve(nanobind::module_& m);

}  // namespace selq::python
