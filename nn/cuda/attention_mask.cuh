#pragma once
// Where the attention bias M of one flat batch starts (AttentionShape, kernels.cuh): shared by the attention kernels.
#include <cstdint>

#include "nn/cuda/kernels.cuh"

namespace sluice::nn::cuda {

// The flat batch index decomposed over batch_shape, dot mask_batch_stride (0 where M broadcasts).
__device__ __forceinline__ std::int64_t attention_mask_offset(const AttentionShape& s, int batch) {
  std::int64_t offset = 0;
  for (int d = s.batch_rank - 1; d >= 0; --d) {
    offset += (batch % s.batch_shape[d]) * s.mask_batch_stride[d];
    batch /= s.batch_shape[d];
  }
  return offset;
}

}  // namespace sluice::nn::cuda
