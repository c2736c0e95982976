#pragma once
// Device memory, streams and host -> device copies for test set-up (plain CUDA, outside the engine's counters).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "runtime/cuda_check.hpp"

namespace sluice::test {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t bytes) { CUDA_CHECK(cudaMalloc(&p_, std::max<std::size_t>(bytes, 1))); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

class TestStream {
 public:
  TestStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~TestStream() { cudaStreamDestroy(s_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// A pageable H2D cudaMemcpy may return before its DMA has landed, and the work under test reads the data on a
// non-blocking stream, which does not wait for the legacy stream: wait for the device before returning.
inline void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace sluice::test
