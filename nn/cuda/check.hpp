#pragma once
// CUDNN_CHECK / CUBLAS_CHECK: a failed cuDNN or cuBLAS call throws GpuError naming the call, the status, file and
// line (CUDA_CHECK for the runtime lives in runtime/cuda_check.hpp).
#include <cublas_v2.h>
#include <cudnn.h>

#include <string>

#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {

// A library call that failed because the device faulted throws GpuFault (the runtime's sticky error says so).
[[noreturn]] inline void throw_library(std::string what) {
  if (const cudaError_t sticky = cudaPeekAtLastError(); ::sluice::detail::is_gpu_fault(sticky))
    throw GpuFault(what + "; the device: " + cudaGetErrorName(sticky));
  throw GpuError(std::move(what));
}

[[noreturn]] inline void throw_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  throw_library(std::string(call) + " failed: " + cudnnGetErrorString(status) + " at " + file + ":" +
                std::to_string(line));
}

[[noreturn]] inline void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  throw_library(std::string(call) + " failed: " + cublasGetStatusName(status) + " (" +
                cublasGetStatusString(status) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace sluice::nn::cuda

#define CUDNN_CHECK(call)                                                                                  \
  do {                                                                                                     \
    cudnnStatus_t sluice_status_ = (call);                                                                 \
    if (sluice_status_ != CUDNN_STATUS_SUCCESS)                                                            \
      ::sluice::nn::cuda::throw_cudnn(sluice_status_, #call, __FILE__, __LINE__);                          \
  } while (0)

#define CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                     \
    cublasStatus_t sluice_status_ = (call);                                                                \
    if (sluice_status_ != CUBLAS_STATUS_SUCCESS)                                                           \
      ::sluice::nn::cuda::throw_cublas(sluice_status_, #call, __FILE__, __LINE__);                         \
  } while (0)
