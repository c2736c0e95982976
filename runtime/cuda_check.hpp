#pragma once
// CUDA_CHECK for translation units compiled against the CUDA runtime (gpu_cuda.cpp, kernels/*.cu).
#include <cuda_runtime_api.h>

#include <string>

#include "runtime/errors.hpp"

namespace sluice::detail {
// The errors after which the device's context is unusable ("the process must be terminated and relaunched").
constexpr bool is_gpu_fault(cudaError_t err) noexcept {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoDevice:
    case cudaErrorContextIsDestroyed:
      return true;
    default:
      return false;
  }
}

[[noreturn]] inline void throw_cuda(cudaError_t err, const char* call, const char* file, int line) {
  std::string what = std::string(call) + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
                     ") at " + file + ":" + std::to_string(line);
  if (is_gpu_fault(err)) throw GpuFault(std::move(what));
  throw GpuError(std::move(what));
}
}  // namespace sluice::detail

#define CUDA_CHECK(call)                                                                   \
  do {                                                                                     \
    cudaError_t sluice_err_ = (call);                                                      \
    if (sluice_err_ != cudaSuccess) ::sluice::detail::throw_cuda(sluice_err_, #call, __FILE__, __LINE__); \
  } while (0)
