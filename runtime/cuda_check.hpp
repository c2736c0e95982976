#pragma once
// CUDA_CHECK for translation units compiled against the CUDA runtime (gpu_cuda.cpp, kernels/*.cu).
#include <cuda_runtime_api.h>

#include <string>

#include "runtime/errors.hpp"

namespace sluice::detail {
[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  throw GpuError(std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                 ") at " + file + ":" + std::to_string(line));
}
}  // namespace sluice::detail

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t sluice_err_ = (call);                                                      \
    if (sluice_err_ != cudaSuccess) ::sluice::detail::throw_cuda(sluice_err_, #call, __FILE__, __LINE__); \
  } while (0)
