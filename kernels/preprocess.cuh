#pragma once
// GPU launcher for the preprocess kernel (see preprocess.hpp for the semantics). No CUDA headers here, so any
// translation unit can include it; the identical typedef is legal next to cuda_runtime.h.
#include <cstdint>

#include "kernels/preprocess.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// Enqueues one kernel launch on `stream` (which must not be null: the legacy default stream is off the data
// path). src_device/dst_device as for preprocess_cpu, in device memory. Throws std::invalid_argument for bad
// params (same checks as the CPU twin) and GpuError if the launch fails. Never synchronises.
void preprocess_gpu(const PreprocessParams& p, const std::uint8_t* src_device, void* dst_device,
                    cudaStream_t stream);

}  // namespace sluice::kernels
