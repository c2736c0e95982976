#include "nn/cuda/gemm.hpp"

#include "nn/cuda/check.hpp"

namespace sluice::nn::cuda {
namespace {
cudaDataType_t cublas_type(DType t) { return t == DType::f32 ? CUDA_R_32F : t == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }
}  // namespace

void row_major_gemm(cublasHandle_t h, DType t, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                    std::int64_t k, float alpha, const void* a, std::int64_t stride_a, const void* b,
                    std::int64_t stride_b, float beta, void* y, std::int64_t batches) {
  const cudaDataType_t dt = cublas_type(t);
  const int lda = static_cast<int>(trans_a ? m : k), ldb = static_cast<int>(trans_b ? k : n);
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (batches == 1)
    CUBLAS_CHECK(cublasGemmEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b,
                              dt, ldb, a, dt, lda, &beta, y, dt, static_cast<int>(n), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
  else
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(h, op_b, op_a, static_cast<int>(n), static_cast<int>(m),
                                            static_cast<int>(k), &alpha, b, dt, ldb, stride_b, a, dt, lda, stride_a,
                                            &beta, y, dt, static_cast<int>(n), m * n, static_cast<int>(batches),
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace sluice::nn::cuda
