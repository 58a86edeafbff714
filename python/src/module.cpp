// `selq._selq`: the native half of the Python package (python/selq).
#include "bindings.h"

NB_MODULE(_selq, m) {
  m.doc() = "selq's libraries, bound for the selq package (use `import selq`, not this module).";
  m.attr("__version__") = SELQ_VERSION;
  selq::python::bind_errors(m);
  selq::python::bind_pipeline(m);
  selq::python::bind_tensor(m);
  selq::python::bind_serve(m);
}
