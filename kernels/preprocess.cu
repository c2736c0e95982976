#include "kernels/preprocess.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>

#include "kernels/preprocess_cpu.hpp"  // validate()
#include "runtime/cuda_check.hpp"

namespace sluice::kernels {
namespace {

struct Tap {
  int i0, i1;
  float w;
};

// Same exact rational coordinates as the CPU twin ((2o+1)*in/(2k*out) - 1/2, k=2 for half-resolution chroma),
// so both pick identical neighbours and weights: a 1-ulp coordinate difference near x~1920 would already move
// the output by more than the test bound on high-contrast input.
__device__ __forceinline__ Tap make_tap(int o, int in, int out, int k, int plane) {
  const long long num = (2LL * o + 1) * in - static_cast<long long>(k) * out;
  const long long den = 2LL * k * out;
  if (num <= 0) return {0, min(1, plane - 1), 0.f};
  const long long i0 = num / den;
  if (i0 >= plane - 1) return {plane - 1, plane - 1, 0.f};
  return {static_cast<int>(i0), static_cast<int>(i0) + 1,
          __fdiv_rn(static_cast<float>(num - i0 * den), static_cast<float>(den))};
}

__device__ __forceinline__ float bilinear(const std::uint8_t* __restrict__ plane, std::size_t stride, int step,
                                          int ch, Tap tx, Tap ty) {
  const std::uint8_t* r0 = plane + static_cast<std::size_t>(ty.i0) * stride;
  const std::uint8_t* r1 = plane + static_cast<std::size_t>(ty.i1) * stride;
  const float a = __ldg(r0 + tx.i0 * step + ch), b = __ldg(r0 + tx.i1 * step + ch);
  const float c = __ldg(r1 + tx.i0 * step + ch), d = __ldg(r1 + tx.i1 * step + ch);
  const float top = a + tx.w * (b - a);
  const float bot = c + tx.w * (d - c);
  return top + ty.w * (bot - top);
}

__device__ __forceinline__ float3 yuv_to_rgb(float y, float u, float v, YuvMatrix m, bool full) {
  if (full) {
    u -= 128.f;
    v -= 128.f;
  } else {
    y = (y - 16.f) * (255.f / 219.f);
    u = (u - 128.f) * (255.f / 224.f);
    v = (v - 128.f) * (255.f / 224.f);
  }
  float r, g, b;
  if (m == YuvMatrix::bt601) {
    r = y + 1.402f * v;
    g = y - 0.344136f * u - 0.714136f * v;
    b = y + 1.772f * u;
  } else {
    r = y + 1.5748f * v;
    g = y - 0.187324f * u - 0.468124f * v;
    b = y + 1.8556f * u;
  }
  return make_float3(fminf(fmaxf(r, 0.f), 255.f), fminf(fmaxf(g, 0.f), 255.f), fminf(fmaxf(b, 0.f), 255.f));
}

// One thread per output pixel (x, y), all channels; z strides over the batch. Format is a template parameter
// so the per-pixel path has no format switch; dtype/layout/order branches are warp-uniform.
template <PixelFormat F>
__global__ void preprocess_kernel(PreprocessParams p, std::size_t in_bytes, const std::uint8_t* __restrict__ src,
                                  void* __restrict__ dst) {
  const int x = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int y = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
  if (x >= p.out_width || y >= p.out_height) return;

  constexpr bool kYuv = F == PixelFormat::nv12 || F == PixelFormat::i420;
  const int in_w = p.in_width, in_h = p.in_height;
  const int cw = in_w / 2, ch = in_h / 2;
  const Tap tx = make_tap(x, in_w, p.out_width, 1, in_w);
  const Tap ty = make_tap(y, in_h, p.out_height, 1, in_h);
  Tap tcx{}, tcy{};
  if constexpr (kYuv) {
    tcx = make_tap(x, in_w, p.out_width, 2, cw);
    tcy = make_tap(y, in_h, p.out_height, 2, ch);
  }

  const int C = p.out_order == ChannelOrder::gray ? 1 : 3;
  const std::size_t plane_px = static_cast<std::size_t>(p.out_width) * static_cast<std::size_t>(p.out_height);
  const std::size_t px = static_cast<std::size_t>(y) * static_cast<std::size_t>(p.out_width) +
                         static_cast<std::size_t>(x);
  const std::size_t luma = static_cast<std::size_t>(in_w) * static_cast<std::size_t>(in_h);
  const std::size_t chroma = static_cast<std::size_t>(cw) * static_cast<std::size_t>(ch);

  for (int n = static_cast<int>(blockIdx.z); n < p.batch; n += static_cast<int>(gridDim.z)) {
    const std::uint8_t* img = src + static_cast<std::size_t>(n) * in_bytes;
    float v[3];
    if constexpr (F == PixelFormat::gray8) {
      const float g = bilinear(img, static_cast<std::size_t>(in_w), 1, 0, tx, ty);
      v[0] = v[1] = v[2] = g;  // gray out: v[0]; colour out: replicated
    } else {
      float3 c;  // r, g, b
      if constexpr (F == PixelFormat::bgr8 || F == PixelFormat::rgb8) {
        const std::size_t stride = static_cast<std::size_t>(in_w) * 3;
        const float s0 = bilinear(img, stride, 3, 0, tx, ty);
        const float s1 = bilinear(img, stride, 3, 1, tx, ty);
        const float s2 = bilinear(img, stride, 3, 2, tx, ty);
        c = F == PixelFormat::rgb8 ? make_float3(s0, s1, s2) : make_float3(s2, s1, s0);
      } else {
        const float Y = bilinear(img, static_cast<std::size_t>(in_w), 1, 0, tx, ty);
        float U, V;
        if constexpr (F == PixelFormat::nv12) {
          U = bilinear(img + luma, static_cast<std::size_t>(cw) * 2, 2, 0, tcx, tcy);
          V = bilinear(img + luma, static_cast<std::size_t>(cw) * 2, 2, 1, tcx, tcy);
        } else {
          U = bilinear(img + luma, static_cast<std::size_t>(cw), 1, 0, tcx, tcy);
          V = bilinear(img + luma + chroma, static_cast<std::size_t>(cw), 1, 0, tcx, tcy);
        }
        c = yuv_to_rgb(Y, U, V, p.yuv_matrix, p.yuv_full_range);
      }
      if (p.out_order == ChannelOrder::gray) {
        v[0] = 0.299f * c.x + 0.587f * c.y + 0.114f * c.z;
      } else if (p.out_order == ChannelOrder::rgb) {
        v[0] = c.x, v[1] = c.y, v[2] = c.z;
      } else {
        v[0] = c.z, v[1] = c.y, v[2] = c.x;
      }
    }

    const std::size_t base = static_cast<std::size_t>(n) * plane_px * static_cast<std::size_t>(C);
    for (int k = 0; k < C; ++k) {
      const float out = __fdiv_rn(v[k] / 255.f - p.mean[k], p.std[k]);
      const std::size_t idx = base + (p.layout == Layout::nchw ? static_cast<std::size_t>(k) * plane_px + px
                                                               : px * static_cast<std::size_t>(C) + k);
      if (p.dtype == DType::f32) {
        static_cast<float*>(dst)[idx] = out;
      } else {
        static_cast<__half*>(dst)[idx] = __float2half_rn(out);
      }
    }
  }
}

template <PixelFormat F>
void launch(const PreprocessParams& p, const std::uint8_t* src, void* dst, cudaStream_t stream) {
  const dim3 block(32, 8);
  // gridDim.z is capped at 65535; the kernel strides over the rest of the batch.
  const dim3 grid((static_cast<unsigned>(p.out_width) + block.x - 1) / block.x,
                  (static_cast<unsigned>(p.out_height) + block.y - 1) / block.y,
                  static_cast<unsigned>(std::min(p.batch, 65535)));
  preprocess_kernel<F><<<grid, block, 0, stream>>>(p, image_bytes(p.in_format, p.in_width, p.in_height), src, dst);
  CUDA_CHECK(cudaPeekAtLastError());
}

}  // namespace

void preprocess_gpu(const PreprocessParams& p, const std::uint8_t* src_device, void* dst_device,
                    cudaStream_t stream) {
  validate(p);
  if (src_device == nullptr || dst_device == nullptr)
    throw std::invalid_argument("preprocess: null src or dst device pointer");
  if (stream == nullptr)
    throw std::invalid_argument("preprocess: a non-null stream is required (the legacy default stream is not used)");
  switch (p.in_format) {
    case PixelFormat::bgr8: launch<PixelFormat::bgr8>(p, src_device, dst_device, stream); break;
    case PixelFormat::rgb8: launch<PixelFormat::rgb8>(p, src_device, dst_device, stream); break;
    case PixelFormat::gray8: launch<PixelFormat::gray8>(p, src_device, dst_device, stream); break;
    case PixelFormat::nv12: launch<PixelFormat::nv12>(p, src_device, dst_device, stream); break;
    case PixelFormat::i420: launch<PixelFormat::i420>(p, src_device, dst_device, stream); break;
  }
}

}  // namespace sluice::kernels
