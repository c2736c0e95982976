// NHWC resize of H and W, nearest or (bi)linear, with ONNX's coordinate transformation and nearest rounding modes.
#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// The source coordinate of output position `o` on an axis of `in` -> `out` elements (ONNX Resize, sizes given,
// so scale = out / in). Double precision keeps exact ties exact.
__device__ double source_coordinate(ResizeCoordinates mode, int o, int in, int out) {
  const double scale = static_cast<double>(out) / in;
  switch (mode) {
    case ResizeCoordinates::half_pixel: return (o + 0.5) / scale - 0.5;
    case ResizeCoordinates::pytorch_half_pixel: return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
    case ResizeCoordinates::align_corners: return out > 1 ? o * static_cast<double>(in - 1) / (out - 1) : 0.0;
    case ResizeCoordinates::asymmetric: return o / scale;
    case ResizeCoordinates::tf_half_pixel_for_nearest: return (o + 0.5) / scale;
  }
  return 0.0;
}

__device__ int nearest_index(NearestRounding r, double x, int in) {
  double v = 0.0;
  switch (r) {
    case NearestRounding::round_prefer_floor: v = (x - floor(x) == 0.5) ? floor(x) : round(x); break;
    case NearestRounding::round_prefer_ceil: v = (x - floor(x) == 0.5) ? ceil(x) : round(x); break;
    case NearestRounding::floor: v = floor(x); break;
    case NearestRounding::ceil: v = ceil(x); break;
  }
  return min(max(static_cast<int>(v), 0), in - 1);
}

template <typename T>
__global__ void resize_kernel(ResizeParams p, T* y, const T* x, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const int c = static_cast<int>(i % p.c);
    std::int64_t rest = i / p.c;
    const int ow = static_cast<int>(rest % p.out_w);
    rest /= p.out_w;
    const int oh = static_cast<int>(rest % p.out_h);
    const std::int64_t b = rest / p.out_h;
    const T* item = x + b * p.h * p.w * p.c + c;
    const double sy = source_coordinate(p.coordinates, oh, p.h, p.out_h);
    const double sx = source_coordinate(p.coordinates, ow, p.w, p.out_w);
    float v;
    if (!p.linear) {
      const int iy = nearest_index(p.rounding, sy, p.h), ix = nearest_index(p.rounding, sx, p.w);
      v = to_f32(item[(static_cast<std::int64_t>(iy) * p.w + ix) * p.c]);
    } else {
      // Neighbours clamp at the edges (ONNX's edge padding, PyTorch's clamping: the same values).
      const double fy = floor(sy), fx = floor(sx);
      const float wy = static_cast<float>(sy - fy), wx = static_cast<float>(sx - fx);
      const int y0 = min(max(static_cast<int>(fy), 0), p.h - 1), y1 = min(max(static_cast<int>(fy) + 1, 0), p.h - 1);
      const int x0 = min(max(static_cast<int>(fx), 0), p.w - 1), x1 = min(max(static_cast<int>(fx) + 1, 0), p.w - 1);
      auto at = [&](int yy, int xx) { return to_f32(item[(static_cast<std::int64_t>(yy) * p.w + xx) * p.c]); };
      const float top = at(y0, x0) * (1.f - wx) + at(y0, x1) * wx;
      const float bottom = at(y1, x0) * (1.f - wx) + at(y1, x1) * wx;
      v = top * (1.f - wy) + bottom * wy;
    }
    y[i] = from_f32<T>(v);
  }
}

}  // namespace

void resize(DType type, const ResizeParams& p, void* y, const void* x, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(p.n) * p.out_h * p.out_w * p.c;
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    resize_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(p, static_cast<T*>(y), static_cast<const T*>(x), n);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
