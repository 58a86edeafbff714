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

}  // namespace selq::runtime::blas
