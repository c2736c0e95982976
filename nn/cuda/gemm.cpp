#include "nn/cuda/gemm.hpp"

#include "nn/cuda/check.hpp"

namespace sluice::nn::cuda {

cudaDataType_t cublas_type(DType t) { return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }

void row_major_gemm(cublasHandle_t h, DType t, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                    std::int64_t k, float alpha, const void* a, std::int64_t stride_a, const void* b,
                    std::int64_t stride_b, float beta, void* y, std::int64_t batches) {
  row_major_gemm_strided(h, t, trans_a, trans_b, m, n, k, alpha, {a, trans_a ? m : k, stride_a},
                         {b, trans_b ? k : n, stride_b}, beta, y, n, m * n, batches);
}

void row_major_gemm_strided(cublasHandle_t h, DType t, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                            std::int64_t k, float alpha, RowMajorOperand a, RowMajorOperand b, float beta, void* y,
                            std::int64_t y_row_stride, std::int64_t y_batch_stride, std::int64_t batches) {
  const cudaDataType_t dt = cublas_type(t);
  const auto lda = static_cast<int>(a.row_stride), ldb = static_cast<int>(b.row_stride);
  const auto ldy = static_cast<int>(y_row_stride);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batches == 1)
    CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                              b.data, dt, ldb, a.data, dt, lda, &beta, y, dt, ldy, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  else
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                            static_cast<int>(k), &alpha, b.data, dt, ldb, b.batch_stride, a.data, dt,
                                            lda, a.batch_stride, &beta, y, dt, ldy, y_batch_stride,
                                            static_cast<int>(batches), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace sluice::nn::cuda
