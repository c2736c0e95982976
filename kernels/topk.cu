#include <cuda_runtime.h>

#include <cfloat>
#include <string>

#include "kernels/topk.cuh"
#include "runtime/errors.hpp"

namespace sluice::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Best {
  float value;
  int index;
};

// The better of two candidates: higher logit, then lower index (index -1 = none).
__device__ Best better(Best a, Best b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  return (b.value > a.value || (b.value == a.value && b.index < a.index)) ? b : a;
}

__device__ Best block_best(Best mine, Best* scratch) {
  for (int off = 16; off > 0; off >>= 1) {
    Best other{__shfl_down_sync(0xffffffffu, mine.value, off), __shfl_down_sync(0xffffffffu, mine.index, off)};
    mine = better(mine, other);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = mine;
  __syncthreads();
  if (warp == 0) {
    mine = lane < kWarps ? scratch[lane] : Best{0.f, -1};
    for (int off = 16; off > 0; off >>= 1) {
      Best other{__shfl_down_sync(0xffffffffu, mine.value, off), __shfl_down_sync(0xffffffffu, mine.index, off)};
      mine = better(mine, other);
    }
    if (lane == 0) scratch[0] = mine;
  }
  __syncthreads();
  const Best result = scratch[0];
  __syncthreads();  // scratch is reused by the next round
  return result;
}

__device__ float block_sum(float v, float* scratch) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < kWarps ? scratch[threadIdx.x] : 0.f;
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    if (threadIdx.x == 0) scratch[0] = v;
  }
  __syncthreads();
  return scratch[0];
}

// k rounds of a block-wide arg-max that skips the classes already chosen (k <= 32, so the list is short).
__global__ void topk_kernel(const float* __restrict__ logits, ClassScore* __restrict__ out, int classes, int k,
                            bool softmax) {
  __shared__ Best best_scratch[kWarps];
  __shared__ float sum_scratch[kWarps];
  __shared__ int chosen[kMaxTopK];
  __shared__ float chosen_logit[kMaxTopK];
  const float* row = logits + static_cast<long long>(blockIdx.x) * classes;
  for (int round = 0; round < k; ++round) {
    Best mine{0.f, -1};
    for (int c = threadIdx.x; c < classes; c += kThreads) {
      bool taken = false;
      for (int j = 0; j < round; ++j) taken |= chosen[j] == c;
      if (!taken) mine = better(mine, Best{row[c], c});
    }
    const Best b = block_best(mine, best_scratch);
    if (threadIdx.x == 0) {
      chosen[round] = b.index;
      chosen_logit[round] = b.value;
    }
    __syncthreads();
  }
  float denom = 1.f;
  if (softmax) {
    const float top = chosen_logit[0];
    float part = 0.f;
    for (int c = threadIdx.x; c < classes; c += kThreads) part += expf(row[c] - top);
    denom = block_sum(part, sum_scratch);
  }
  if (threadIdx.x < k) {
    const int i = threadIdx.x;
    ClassScore s;
    s.index = chosen[i];
    s.score = softmax ? expf(chosen_logit[i] - chosen_logit[0]) / denom : chosen_logit[i];
    out[static_cast<long long>(blockIdx.x) * k + i] = s;
  }
}

}  // namespace

void topk_gpu(const TopKParams& p, const float* logits, ClassScore* out, cudaStream_t stream) {
  validate(p);
  if (stream == nullptr) throw std::invalid_argument("top-k: a non-null stream is required");
  if (p.items == 0) return;
  topk_kernel<<<p.items, kThreads, 0, stream>>>(logits, out, p.classes, p.k, p.softmax);
  if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess)
    throw GpuError(std::string("top-k kernel launch: ") + cudaGetErrorString(e));
}

}  // namespace sluice::kernels
