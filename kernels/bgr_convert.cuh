#pragma once
// GPU launcher for the BGR conversion (semantics in bgr_convert.hpp). No CUDA headers here.
#include <cstdint>

#include "kernels/bgr_convert.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// Enqueues one launch on `stream` (not null); src and dst in device memory. Throws std::invalid_argument for
// bad params and GpuError when the launch fails. Never synchronises.
void bgr_convert_gpu(const BgrConvertParams& p, const std::uint8_t* src_device, std::uint8_t* dst_device,
                     cudaStream_t stream);

}  // namespace sluice::kernels
