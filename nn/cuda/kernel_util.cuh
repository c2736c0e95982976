#pragma once
// Device helpers shared by the backend's kernels: f32 <-> element conversions, grid sizing, type dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>

#include "nn/cuda/kernels.cuh"
#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// nn/activation_math.hpp: on the device, the kernels' formulas (__expf, fminf/fmaxf).
__device__ __forceinline__ float apply_activation(const ActivationParams& a, float x) { return nn::activate(a, x); }

// The maximum and the sum of v over the 32 lanes of a (fully active) warp, in every lane.
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU several times over, never more than needed.
inline unsigned grid_for(std::int64_t n, int block = kBlock) {
  const std::int64_t blocks = (n + block - 1) / block;
  return static_cast<unsigned>(std::clamp<std::int64_t>(blocks, 1, 132 * 32));
}

inline void check_launch() { CUDA_CHECK(cudaPeekAtLastError()); }

// Calls f(T{}) with T the device type of `type` (float, __half, __nv_bfloat16).
template <typename F>
void dispatch_float_type(DType type, F&& f) {
  switch (type) {
    case DType::f32: f(float{}); return;
    case DType::f16: f(__half{}); return;
    case DType::bf16: f(__nv_bfloat16{}); return;
    case DType::u8: break;
  }
  throw std::invalid_argument("nn/cuda: kernels take f32, f16 or bf16 data");
}

// Division of a non-negative 32-bit index below 2^31 by a divisor fixed at launch (a shape's extent, below 2^31):
// a multiply-high, an add and a shift instead of the dozens of instructions of an integer division
// (the round-up method of Granlund and Montgomery; (t + n) cannot overflow while n < 2^31).
struct FastDiv {
  std::uint32_t divisor = 1, magic = 1, shift = 0;
  FastDiv() = default;
  explicit FastDiv(std::uint32_t d) : divisor(d) {
    while (shift < 31 && (std::uint32_t{1} << shift) < d) ++shift;
    magic = static_cast<std::uint32_t>(((std::uint64_t{1} << 32) * ((std::uint64_t{1} << shift) - d)) / d + 1);
  }
  __device__ __forceinline__ std::uint32_t div(std::uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
};

// Index decomposition of a row-major shape, dot with strides.
__device__ __forceinline__ std::int64_t offset_of(std::int64_t linear, int rank, const std::int64_t* shape,
                                                  const std::int64_t* stride) {
  std::int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const std::int64_t q = linear / shape[d];
    off += (linear - q * shape[d]) * stride[d];
    linear = q;
  }
  return off;
}

}  // namespace sluice::nn::cuda
