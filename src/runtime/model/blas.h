#pragma once
// The two CBLAS routines the reference runtime uses, resolved from the BLAS
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

// LAPACK's Cholesky factor (dpotrf) and the inverse from it (dpotri) of a
// symmetric positive definite n x n matrix, column-major, lower triangle
// ('L'); return LAPACK's info (0: success; > 0: not positive definite).
// OpenBLAS exports both; another BLAS without LAPACK fails with one line.
int dpotrf_lower(int n, double* a, int lda);
int dpotri_lower(int n, double* a, int lda);

}  // namespace selq::runtime::blas
