#include <cuda_runtime.h>

#include <string>

#include "kernels/scatter_scores.cuh"
#include "runtime/errors.hpp"

namespace sluice::kernels {
namespace {

// One thread per entry: entry e of crop c goes to dst + offsets[c] + e * 8.
__global__ void scatter_kernel(const ClassScore* scores, int k, const std::uint64_t* offsets, int count,
                               std::byte* dst) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<long long>(count) * k) return;
  const long long c = i / k, e = i % k;
  reinterpret_cast<ClassScore*>(dst + offsets[c])[e] = scores[i];
}

}  // namespace

void scatter_scores_gpu(const ClassScore* scores_device, int k, const std::uint64_t* offsets_device, int count,
                        std::byte* dst, cudaStream_t stream) {
  if (count <= 0 || k <= 0) return;
  constexpr int kThreads = 256;
  const long long entries = static_cast<long long>(count) * k;
  const auto blocks = static_cast<unsigned>((entries + kThreads - 1) / kThreads);
  scatter_kernel<<<blocks, kThreads, 0, stream>>>(scores_device, k, offsets_device, count, dst);
  if (const cudaError_t e = cudaPeekAtLastError(); e != cudaSuccess)
    throw GpuError(std::string("score scatter kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace sluice::kernels
