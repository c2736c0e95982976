// NHWC pooling: max/average windows and the global average. One thread per output element, channels fastest, so
// a warp reads consecutive channels of one input pixel (coalesced).
#include <cfloat>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// V consecutive channels per thread: 16-byte loads and stores when the channel count allows (V = 1 otherwise).
template <typename T, int V>
struct alignas(sizeof(T) * V) Channels {
  T v[V];
};

template <typename T, int V>
__global__ void pool2d_kernel(Pool2dParams p, T* y, const T* x, std::int64_t n) {
  const int groups = p.c / V;  // channel groups per pixel
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int g = static_cast<int>(i % groups);
    const std::int64_t pixel = i / groups;
    const int ow = static_cast<int>(pixel % p.out_w);
    const std::int64_t rest = pixel / p.out_w;
    const int oh = static_cast<int>(rest % p.out_h);
    const std::int64_t b = rest / p.out_h;
    const int h0 = oh * p.stride_h - p.pad_top, w0 = ow * p.stride_w - p.pad_left;
    const auto* item = reinterpret_cast<const Channels<T, V>*>(x + b * p.h * p.w * p.c) + g;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = p.max ? -FLT_MAX : 0.f;
    int inside = 0;
    for (int kh = 0; kh < p.kernel_h; ++kh) {
      const int ih = h0 + kh * p.dilation_h;
      if (ih < 0 || ih >= p.h) continue;
      for (int kw = 0; kw < p.kernel_w; ++kw) {
        const int iw = w0 + kw * p.dilation_w;
        if (iw < 0 || iw >= p.w) continue;
        const Channels<T, V> v = item[(ih * p.w + iw) * groups];
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = p.max ? fmaxf(acc[k], to_f32(v.v[k])) : acc[k] + to_f32(v.v[k]);
        ++inside;
      }
    }
    float scale = 1.f;
    if (!p.max) {
      int divisor = inside;
      if (p.count_include_pad) {  // the window clipped to the padded input
        const int h_end = min(h0 + p.kernel_h, p.h + p.pad_bottom), w_end = min(w0 + p.kernel_w, p.w + p.pad_right);
        divisor = (h_end - h0) * (w_end - w0);
      }
      scale = divisor > 0 ? 1.f / static_cast<float>(divisor) : 0.f;
    }
    Channels<T, V> out;
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = from_f32<T>(p.max ? acc[k] : acc[k] * scale);
    reinterpret_cast<Channels<T, V>*>(y)[i] = out;
  }
}

template <typename T>
__global__ void global_average_kernel(T* y, const T* x, std::int64_t n, std::int64_t hw, std::int64_t c) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const float inv = 1.f / static_cast<float>(hw);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n * c; i += step) {
    const std::int64_t b = i / c, ch = i - b * c;
    const T* p = x + b * hw * c + ch;
    float acc = 0.f;
    for (std::int64_t k = 0; k < hw; ++k) acc += to_f32(p[k * c]);
    y[i] = from_f32<T>(acc * inv);
  }
}

}  // namespace

void pool2d(DType type, const Pool2dParams& p, void* y, const void* x, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(p.n) * p.out_h * p.out_w * p.c;
  if (n == 0) return;
  const bool aligned = reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    if (aligned && p.c % V == 0)
      pool2d_kernel<T, V><<<grid_for(n / V), kBlock, 0, stream>>>(p, static_cast<T*>(y), static_cast<const T*>(x), n / V);
    else
      pool2d_kernel<T, 1><<<grid_for(n), kBlock, 0, stream>>>(p, static_cast<T*>(y), static_cast<const T*>(x), n);
  });
  check_launch();
}

void global_average_pool(DType type, void* y, const void* x, std::int64_t n, std::int64_t hw, std::int64_t c,
                         cudaStream_t stream) {
  if (n * c == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    global_average_kernel<T><<<grid_for(n * c), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n,
                                                                     hw, c);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
