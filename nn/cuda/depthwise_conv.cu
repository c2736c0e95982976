// Depthwise 2-D convolution (group == channels == outputs), NHWC, with the Conv epilogue inside.
// cuDNN runs these at a small fraction of memory bandwidth (ConvNeXt's 7x7 at [64,96,56,56]: ~2.5 ms for 40 MB);
// the operation is a per-channel stencil, so a direct kernel is memory and L1 bound:
//   * one thread: V adjacent channels (one 16-byte load of x when C allows) x kPixels adjacent output columns;
//     consecutive threads take consecutive channel groups, so a warp reads contiguous bytes of a row of pixels;
//   * the weights, re-laid [R, S, C] f32 at build, are read once per tap for all kPixels outputs (vector loads);
//   * 3x3, 5x5 and 7x7 filters at stride and dilation 1 along W keep a row's inputs in registers for all taps;
//     other shapes load each tap's inputs and let L1 serve the overlap. Neighbouring threads' overlap is L1's
//     too (no shared memory staging: it would cost the same L1/shared bandwidth and a barrier);
//   * f32 accumulation; bias, residual and activation applied before the one store of y.
#include <type_traits>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

template <typename T, int V>
struct alignas(sizeof(T) * V) Lanes {
  T v[V];
};

// V consecutive f32 values at an address aligned to V * 4 bytes (V divides C, and C and c0 are multiples of V).
template <int V>
__device__ __forceinline__ void load_weights(const float* w, float (&out)[V]) {
  if constexpr (V % 4 == 0) {
#pragma unroll
    for (int k = 0; k < V; k += 4) {
      const float4 q = __ldg(reinterpret_cast<const float4*>(w + k));
      out[k] = q.x;
      out[k + 1] = q.y;
      out[k + 2] = q.z;
      out[k + 3] = q.w;
    }
  } else if constexpr (V == 2) {
    const float2 q = __ldg(reinterpret_cast<const float2*>(w));
    out[0] = q.x;
    out[1] = q.y;
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = __ldg(w + k);
  }
}

// The lanes as f32, two at a time where the type has a paired conversion (one instruction for two values).
template <typename T, int V>
__device__ __forceinline__ void widen(const Lanes<T, V>& in, float (&out)[V]) {
  if constexpr (V % 2 == 0 && std::is_same_v<T, __half>) {
#pragma unroll
    for (int k = 0; k < V; k += 2) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&in.v[k]));
      out[k] = f.x;
      out[k + 1] = f.y;
    }
  } else if constexpr (V % 2 == 0 && std::is_same_v<T, __nv_bfloat16>) {
#pragma unroll
    for (int k = 0; k < V; k += 2) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&in.v[k]));
      out[k] = f.x;
      out[k + 1] = f.y;
    }
  } else {
#pragma unroll
    for (int k = 0; k < V; ++k) out[k] = to_f32(in.v[k]);
  }
}

// Output columns per thread: the weights of a tap are loaded once for all of them.
constexpr int kPixels = 4;

// Width 0: any filter width, stride and dilation along W; each of a tap's kPixels inputs is loaded (L1 serves
// the overlap between taps). Width 3, 5 or 7 (stride and dilation 1 along W): a row's kPixels + Width - 1 inputs
// are loaded once into registers and every tap reads them there, 2.5x fewer loads for 7x7.
template <typename T, int V, int Width>
__global__ void __launch_bounds__(kBlock, 2) depthwise_kernel(DepthwiseConv2dParams p, T* __restrict__ y, const T* __restrict__ x,
                                 const float* __restrict__ weights, const float* __restrict__ bias,
                                 const T* __restrict__ residual, ActivationParams act, std::int64_t items) {
  const int channel_groups = p.c / V;
  const int strips = (p.out_w + kPixels - 1) / kPixels;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items; i += step) {
    const int c0 = static_cast<int>(i % channel_groups) * V;
    std::int64_t rest = i / channel_groups;
    const int ow0 = static_cast<int>(rest % strips) * kPixels;
    rest /= strips;
    const int oh = static_cast<int>(rest % p.out_h);
    const std::int64_t n = rest / p.out_h;

    float acc[kPixels][V];
#pragma unroll
    for (int q = 0; q < kPixels; ++q)
#pragma unroll
      for (int k = 0; k < V; ++k) acc[q][k] = 0.f;

    const T* image = x + n * p.h * p.w * p.c + c0;
    const int ih0 = oh * p.stride_h - p.pad_top;
    const int iw0 = ow0 * p.stride_w - p.pad_left;
    for (int r = 0; r < p.kernel_h; ++r) {
      const int ih = ih0 + r * p.dilation_h;
      if (ih < 0 || ih >= p.h) continue;
      const T* row = image + static_cast<std::int64_t>(ih) * p.w * p.c;
      const float* tap_weights = weights + static_cast<std::int64_t>(r) * p.kernel_w * p.c + c0;
      if constexpr (Width == 0) {
        for (int s = 0; s < p.kernel_w; ++s) {
          float w[V];
          load_weights<V>(tap_weights + static_cast<std::int64_t>(s) * p.c, w);
          const int iw_tap = iw0 + s * p.dilation_w;
#pragma unroll
          for (int q = 0; q < kPixels; ++q) {
            const int iw = iw_tap + q * p.stride_w;
            if (iw < 0 || iw >= p.w) continue;  // padding (columns past out_w compute, but are not stored)
            float in[V];
            widen(*reinterpret_cast<const Lanes<T, V>*>(row + static_cast<std::int64_t>(iw) * p.c), in);
#pragma unroll
            for (int k = 0; k < V; ++k) acc[q][k] = fmaf(in[k], w[k], acc[q][k]);
          }
        }
      } else {
        constexpr int kSpan = kPixels + Width - 1;
        Lanes<T, V> span[kSpan];
#pragma unroll
        for (int j = 0; j < kSpan; ++j) {
          const int iw = iw0 + j;
          if (iw >= 0 && iw < p.w)
            span[j] = *reinterpret_cast<const Lanes<T, V>*>(row + static_cast<std::int64_t>(iw) * p.c);
          else
            span[j] = Lanes<T, V>{};  // padding
        }
#pragma unroll
        for (int s = 0; s < Width; ++s) {
          float w[V];
          load_weights<V>(tap_weights + static_cast<std::int64_t>(s) * p.c, w);
#pragma unroll
          for (int q = 0; q < kPixels; ++q) {
            float in[V];
            widen(span[q + s], in);
#pragma unroll
            for (int k = 0; k < V; ++k) acc[q][k] = fmaf(in[k], w[k], acc[q][k]);
          }
        }
      }
    }

    float b[V];
#pragma unroll
    for (int k = 0; k < V; ++k) b[k] = 0.f;
    if (bias) load_weights<V>(bias + c0, b);
#pragma unroll
    for (int q = 0; q < kPixels; ++q) {
      if (ow0 + q >= p.out_w) break;
      const std::int64_t at = ((n * p.out_h + oh) * p.out_w + ow0 + q) * p.c + c0;
      Lanes<T, V> res{};
      if (residual) res = *reinterpret_cast<const Lanes<T, V>*>(residual + at);
      Lanes<T, V> out;
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float v = acc[q][k] + b[k];
        if (residual) v += to_f32(res.v[k]);
        out.v[k] = from_f32<T>(apply_activation(act, v));
      }
      *reinterpret_cast<Lanes<T, V>*>(y + at) = out;
    }
  }
}

bool aligned_to(const void* ptr, std::size_t bytes) {
  return ptr == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % bytes == 0;
}

template <typename T, int V>
void launch(const DepthwiseConv2dParams& p, void* y, const void* x, const float* weights, const float* bias,
            const void* residual, ActivationParams act, cudaStream_t stream) {
  const std::int64_t items = static_cast<std::int64_t>(p.n) * p.out_h * ((p.out_w + kPixels - 1) / kPixels) * (p.c / V);
  auto run = [&](auto width) {
    depthwise_kernel<T, V, decltype(width)::value><<<grid_for(items), kBlock, 0, stream>>>(
        p, static_cast<T*>(y), static_cast<const T*>(x), weights, bias, static_cast<const T*>(residual), act, items);
  };
  if (!p.keep_rows || !depthwise_keeps_rows(p.kernel_w, p.stride_w, p.dilation_w))
    return run(std::integral_constant<int, 0>{});
  switch (p.kernel_w) {
    case 3: return run(std::integral_constant<int, 3>{});
    case 5: return run(std::integral_constant<int, 5>{});
    default: return run(std::integral_constant<int, 7>{});
  }
}

}  // namespace

void depthwise_conv2d(DType type, const DepthwiseConv2dParams& p, void* y, const void* x, const float* weights,
                      const float* bias, const void* residual, ActivationParams act, cudaStream_t stream) {
  if (static_cast<std::int64_t>(p.n) * p.out_h * p.out_w * p.c == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr int kWide = 16 / sizeof(T);  // one 16-byte access
    // The widest channel group that divides C and that every pointer is aligned for (C is often odd in tests
    // and small models; ConvNeXt and MobileNets have multiples of 8).
    auto fits = [&](int v) {
      const std::size_t bytes = sizeof(T) * static_cast<std::size_t>(v);
      return p.c % v == 0 && aligned_to(x, bytes) && aligned_to(y, bytes) && aligned_to(residual, bytes) &&
             aligned_to(weights, sizeof(float) * v) && aligned_to(bias, sizeof(float) * v);
    };
    if (fits(kWide))
      launch<T, kWide>(p, y, x, weights, bias, residual, act, stream);
    else if (fits(2))
      launch<T, 2>(p, y, x, weights, bias, residual, act, stream);
    else
      launch<T, 1>(p, y, x, weights, bias, residual, act, stream);
  });
  check_launch();
}

bool depthwise_keeps_rows(int kernel_w, int stride_w, int dilation_w) {
  return stride_w == 1 && dilation_w == 1 && (kernel_w == 3 || kernel_w == 5 || kernel_w == 7);
}

int depthwise_channels_per_thread(DType type, int channels) {
  const int wide = 16 / static_cast<int>(dtype_bytes(type));
  return channels % wide == 0 ? wide : channels % 2 == 0 ? 2 : 1;
}

}  // namespace sluice::nn::cuda
