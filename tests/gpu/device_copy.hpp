#pragma once
// Host -> device copies for test set-up.
#include <cuda_runtime.h>

#include <cstddef>

#include "runtime/cuda_check.hpp"

namespace sluice::test {

// A pageable H2D cudaMemcpy may return before its DMA has landed, and the work under test reads the data on a
// non-blocking stream, which does not wait for the legacy stream: wait for the device before returning.
inline void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace sluice::test
