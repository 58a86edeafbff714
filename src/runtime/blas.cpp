#include "runtime/blas.h"

#include <exception>

#include "core/shared_library.h"

namespace selq::runtime::blas {
namespace {

struct Api {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_sgemv) sgemv;
};

const Api& api() {
  static const Api loaded = [] {
    // Never closed (see ~SharedLibrary): OpenBLAS's threads outlive static destruction.
    static const SharedLibrary lib(SELQ_BLAS_SONAME, "the reference runtime's matrix products");
    // The runtime splits its products over TBB tasks (runtime/matrix.h), each
    // a one-thread BLAS call; OpenBLAS's own threads would oversubscribe the
    // cores. Other BLAS libraries lack the call and are left as they are.
    try {
      using SetThreads = void (*)(int);
      lib.function<SetThreads>("openblas_set_num_threads")(1);
    } catch (const std::exception&) {
    }
    return Api{lib.function<decltype(&cblas_sgemm)>("cblas_sgemm"),
               lib.function<decltype(&cblas_sgemv)>("cblas_sgemv")};
  }();
  return loaded;
}

}  // namespace

void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  api().sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void sgemv(CBLAS_ORDER order, CBLAS_TRANSPOSE trans, int m, int n, float alpha, const float* a, int lda,
           const float* x, int incx, float beta, float* y, int incy) {
  api().sgemv(order, trans, m, n, alpha, a, lda, x, incx, beta, y, incy);
}

}  // namespace selq::runtime::blas
