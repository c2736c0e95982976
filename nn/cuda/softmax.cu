// Softmax and LogSoftmax over one axis of a contiguous [outer, len, inner] block, the maximum subtracted first and
// the sum kept in f32. inner == 1 (the usual class axis): one warp a row with shuffles; otherwise one thread a
// column (consecutive threads read consecutive addresses).
#include <cfloat>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// One output element from its input v, the row's maximum m and the sum s of exp(x - m).
__device__ __forceinline__ float softmax_of(float v, float m, float s, bool log) {
  return log ? (v - m) - logf(s) : __expf(v - m) / s;
}

template <typename T>
__global__ void softmax_rows_kernel(T* y, const T* x, std::int64_t rows, std::int64_t len, bool log) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; r < rows;
       r += warps) {
    const T* in = x + r * len;
    T* out = y + r * len;
    float m = -FLT_MAX;
    for (std::int64_t k = lane; k < len; k += 32) m = fmaxf(m, to_f32(in[k]));
    m = warp_max(m);
    float s = 0.f;
    for (std::int64_t k = lane; k < len; k += 32) s += __expf(to_f32(in[k]) - m);
    s = warp_sum(s);
    for (std::int64_t k = lane; k < len; k += 32) out[k] = from_f32<T>(softmax_of(to_f32(in[k]), m, s, log));
  }
}

template <typename T>
__global__ void softmax_columns_kernel(T* y, const T* x, std::int64_t outer, std::int64_t len, std::int64_t inner,
                                       bool log) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < outer * inner;
       i += step) {
    const std::int64_t o = i / inner, in_pos = i - o * inner;
    const T* in = x + o * len * inner + in_pos;
    T* out = y + o * len * inner + in_pos;
    float m = -FLT_MAX;
    for (std::int64_t k = 0; k < len; ++k) m = fmaxf(m, to_f32(in[k * inner]));
    float s = 0.f;
    for (std::int64_t k = 0; k < len; ++k) s += __expf(to_f32(in[k * inner]) - m);
    for (std::int64_t k = 0; k < len; ++k) out[k * inner] = from_f32<T>(softmax_of(to_f32(in[k * inner]), m, s, log));
  }
}

}  // namespace

void softmax(DType type, void* y, const void* x, std::int64_t outer, std::int64_t len, std::int64_t inner, bool log,
             cudaStream_t stream) {
  if (outer * len * inner == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    if (inner == 1)
      softmax_rows_kernel<T><<<grid_for(outer * 32), kBlock, 0, stream>>>(static_cast<T*>(y),
                                                                          static_cast<const T*>(x), outer, len, log);
    else
      softmax_columns_kernel<T><<<grid_for(outer * inner), kBlock, 0, stream>>>(
          static_cast<T*>(y), static_cast<const T*>(x), outer, len, inner, log);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
