#pragma once
// GPU launcher for the NV12/P016 conversion (semantics in nv12_convert.hpp). No CUDA headers here.
#include <cstdint>

#include "kernels/nv12_convert.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// Enqueues one launch on `stream` (not null); planes and dst in device memory. Throws std::invalid_argument
// for bad params and GpuError when the launch fails. Never synchronises.
void nv12_convert_gpu(const Nv12ConvertParams& p, const std::uint8_t* luma_device, const std::uint8_t* chroma_device,
                      std::uint8_t* dst_device, cudaStream_t stream);

}  // namespace sluice::kernels
