#pragma once
// The CBLAS routines the reference runtime uses, resolved from the BLAS
// library on first use (see core/shared_library.h for why it is not linked
// at start-up: OpenBLAS's thread alone took a share of one core during every
// quantize run). The enums and signatures are CBLAS's own.
#include <cblas.h>

namespace selq::runtime::blas {

// C := alpha * op(A) * op(B) + beta * C
void sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);

// y := alpha * op(A) * x + beta * y
void sgemv(CBLAS_ORDER order, CBLAS_TRANSPOSE trans, int m, int n, float alpha, const float* a, int lda,
           const float* x, int incx, float beta, float* y, int incy);

// C := alpha * op(A) * op(B) + beta * C, in double (GPTQ, calibration/gptq.cpp)
void dgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE trans_a, CBLAS_TRANSPOSE trans_b, int m, int n, int k, double alpha,
           const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc);

// LAPACK's Cholesky factor (dpotrf) of a symmetric positive definite n x n
// matrix, column-major, lower triangle ('L'); return LAPACK's info (0:
// success; > 0: not positive definite). OpenBLAS exports it and dtrtri;
// another BLAS without LAPACK fails with one line.
int dpotrf_lower(int n, double* a, int lda);
// LAPACK's inverse of a lower triangular matrix with its diagonal (dtrtri 'L', 'N'), column-major.
int dtrtri_lower(int n, double* a, int lda);

// OpenBLAS's own threads for the BLAS calls made while this lives (else every
// call runs on one thread: the runtime splits its products over TBB tasks).
// For one large factorization with nothing else running, as GPTQ's inverse of
// a 7168-input Hessian; another BLAS library is left as it is. OpenBLAS's
// threaded LAPACK rounds differently for different thread counts: pass a fixed
// count, never the machine's, where the bytes must not depend on the machine.
class ThreadsForOneCall {
 public:
  explicit ThreadsForOneCall(int threads);
  ~ThreadsForOneCall();
  ThreadsForOneCall(const ThreadsForOneCall&) = delete;
  ThreadsForOneCall& operator=(const ThreadsForOneCall&) = delete;

 private:
  bool set_{false};
};

}  // namespace selq::runtime::blas
