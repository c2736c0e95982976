#pragma once
// GPU launcher for top-k (semantics in topk.hpp). No CUDA headers, so any translation unit can include it.
#include "kernels/topk.hpp"

struct CUstream_st;
using cudaStream_t = CUstream_st*;

namespace sluice::kernels {

// One block per item, enqueued on `stream` (non-null); logits and out in device memory. Never synchronises.
// Throws std::invalid_argument for bad params and GpuError if the launch fails.
void topk_gpu(const TopKParams& p, const float* logits, ClassScore* out, cudaStream_t stream);

}  // namespace sluice::kernels
