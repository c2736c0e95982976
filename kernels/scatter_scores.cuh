#pragma once
// GPU launcher for the scatter of class scores (see scatter_scores.hpp). No CUDA headers here.
#include <cstddef>
#include <cstdint>

#include "kernels/scatter_scores.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// scores_device: count x k entries; offsets_device: count byte offsets into dst, which the GPU can write (device
// memory, or pinned host memory: the GPU writes the records in place, no copy afterwards). count 0 launches
// nothing. Throws GpuError if the launch fails.
void scatter_scores_gpu(const ClassScore* scores_device, int k, const std::uint64_t* offsets_device, int count,
                        std::byte* dst, cudaStream_t stream);

}  // namespace sluice::kernels
