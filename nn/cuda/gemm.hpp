#pragma once
// Row-major products on cuBLAS (Y^T = B^T A^T in cuBLAS' column-major terms), f32 accumulation: tensor cores for
// f16/bf16, plain FP32 for f32 (no TF32). Used by Gemm/MatMul and by 1x1 convolutions run as products.
#include <cublas_v2.h>

#include <cstdint>

#include "runtime/format.hpp"

namespace sluice::nn::cuda {

cudaDataType_t cublas_type(DType t);

// Y[M,N] = alpha op(A) op(B) + beta Y, `batches` times with the given element strides between operands
// (Y's stride is M*N). Throws GpuError when cuBLAS refuses.
void row_major_gemm(cublasHandle_t h, DType t, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                    std::int64_t k, float alpha, const void* a, std::int64_t stride_a, const void* b,
                    std::int64_t stride_b, float beta, void* y, std::int64_t batches);

// The same with each operand's row stride given (lda, ldb, ldy: elements between rows as the operand is stored,
// before op()) and Y's batch stride: operands read in place from inside a larger tensor (a sequence-first
// [S, B, d] one: rows B*d apart, batches d apart).
struct RowMajorOperand {
  const void* data;
  std::int64_t row_stride, batch_stride;
};
void row_major_gemm_strided(cublasHandle_t h, DType t, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                            std::int64_t k, float alpha, RowMajorOperand a, RowMajorOperand b, float beta, void* y,
                            std::int64_t y_row_stride, std::int64_t y_batch_stride, std::int64_t batches);

}  // namespace sluice::nn::cuda
