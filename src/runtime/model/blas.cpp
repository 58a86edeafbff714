#include "runtime/model/blas.h"

#include <cstdlib>
#include <exception>

#include <fmt/format.h>

#include "core/error.h"

#include "core/shared_library.h"

namespace selq::runtime::blas {
namespace {

// LAPACK's Fortran entry points (OpenBLAS's are C and take no hidden string lengths).
using LapackFactor = void (*)(const char* uplo, const int* n, double* a, const int* lda, int* info);
using LapackTriangularInverse = void (*)(const char* uplo, const char* diag, const int* n, double* a, const int* lda,
                                         int* info);
using SetThreads = void (*)(int);

struct Api {
  decltype(&cblas_sgemm) sgemm;
  decltype(&cblas_sgemv) sgemv;
  decltype(&cblas_dgemm) dgemm;
  LapackFactor dpotrf{nullptr};
  LapackTriangularInverse dtrtri{nullptr};
  SetThreads set_threads{nullptr};  // OpenBLAS's own
};

// Debian 12's OpenBLAS (0.3.21) does not know some newer x86 CPUs (a 2-vCPU Intel
// Xeon with AVX-512 FP16 here) and falls back to its SSE3 "Prescott" kernels: half the
// speed of its AVX2 "Haswell" ones on the same machine (docs/BENCHMARKS.md, "OpenBLAS's
// core"). Where the user set no core and the CPU has AVX2 and FMA, the Haswell kernels
// are asked for before the library loads; they run on every such CPU, and on AMD Zen
// they are what OpenBLAS picks anyway. Read once, at load (OPENBLAS_CORETYPE).
void choose_openblas_core() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ::setenv("OPENBLAS_CORETYPE", "Haswell", 0);
}

const Api& api() {
  static const Api loaded = [] {
    choose_openblas_core();
    // Never closed (see ~SharedLibrary): OpenBLAS's threads outlive static destruction.
    static const SharedLibrary lib(SELQ_BLAS_SONAME, "the reference runtime's matrix products");
    // The runtime splits its products over TBB tasks (runtime/model/matrix.h), each
    // a one-thread BLAS call; OpenBLAS's own threads would oversubscribe the
    // cores. Other BLAS libraries lack the call and are left as they are.
    Api a{lib.function<decltype(&cblas_sgemm)>("cblas_sgemm"), lib.function<decltype(&cblas_sgemv)>("cblas_sgemv"),
          lib.function<decltype(&cblas_dgemm)>("cblas_dgemm")};
    try {
      a.set_threads = lib.function<SetThreads>("openblas_set_num_threads");
      a.set_threads(1);
    } catch (const std::exception&) {
    }
    try {  // GPTQ only: a BLAS without LAPACK still runs everything else
      a.dpotrf = lib.function<LapackFactor>("dpotrf_");
      a.dtrtri = lib.function<LapackTriangularInverse>("dtrtri_");
    } catch (const std::exception&) {
    }
    return a;
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

void dgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, double alpha,
           const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc) {
  api().dgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

namespace {
// A LAPACK entry point GPTQ needs, or Unsupported naming it and the library.
template <class F>
F lapack_function(F f, const char* name) {
  if (!f)
    throw_unsupported(fmt::format("GPTQ needs LAPACK's {}, which the BLAS library {} does not export (OpenBLAS does)",
                                  name, SELQ_BLAS_SONAME));
  return f;
}
}  // namespace

int dpotrf_lower(int n, double* a, int lda) {
  const char uplo = 'L';
  int info = 0;
  lapack_function(api().dpotrf, "dpotrf")(&uplo, &n, a, &lda, &info);
  return info;
}

int dtrtri_lower(int n, double* a, int lda) {
  const char uplo = 'L', diag = 'N';
  int info = 0;
  lapack_function(api().dtrtri, "dtrtri")(&uplo, &diag, &n, a, &lda, &info);
  return info;
}

ThreadsForOneCall::ThreadsForOneCall(int threads) {
  if (api().set_threads && threads > 1) {
    api().set_threads(threads);
    set_ = true;
  }
}

ThreadsForOneCall::~ThreadsForOneCall() {
  if (set_) api().set_threads(1);
}

}  // namespace selq::runtime::blas
