// GatherElements and GridSample: one thread an output element, every operand read through its View (so NHWC and
// row-major values alike), in nn/sampling_math.hpp's formulas (the CPU layers' own).
#include <cmath>

#include "nn/cuda/kernel_util.cuh"
#include "nn/sampling_math.hpp"

namespace sluice::nn::cuda {
namespace {

template <typename T, typename I>
__global__ void gather_elements_kernel(T* y, View yv, const T* x, View xv, const I* indices, View iv, int axis,
                                       std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t dim = xv.shape[axis];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    std::int64_t rest = i, y_off = yv.offset, i_off = iv.offset, x_off = xv.offset;
    for (int d = yv.rank - 1; d >= 0; --d) {
      const std::int64_t q = rest / yv.shape[d], c = rest - q * yv.shape[d];
      rest = q;
      y_off += c * yv.stride[d];
      i_off += c * iv.stride[d];
      if (d != axis) x_off += c * xv.stride[d];
    }
    const std::int64_t at = gather_position(to_f32(indices[i_off]), dim);
    y[y_off] = at < 0 ? from_f32<T>(NAN) : x[x_off + at * xv.stride[axis]];
  }
}

template <typename T>
__global__ void grid_sample_kernel(GridSampleParams p, T* y, View yv, const T* x, View xv, const T* grid, View gv,
                                   std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const int h = static_cast<int>(xv.shape[2]), w = static_cast<int>(xv.shape[3]);
  const auto padding = static_cast<GridSamplePadding>(p.padding);
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    // i in y's logical order [N, C, Ho, Wo]
    std::int64_t rest = i;
    const std::int64_t ox = rest % yv.shape[3];
    rest /= yv.shape[3];
    const std::int64_t oy = rest % yv.shape[2];
    rest /= yv.shape[2];
    const std::int64_t c = rest % yv.shape[1], b = rest / yv.shape[1];
    const T* at_grid = grid + gv.offset + b * gv.stride[0] + oy * gv.stride[1] + ox * gv.stride[2];
    const float gx = to_f32(at_grid[0]), gy = to_f32(at_grid[gv.stride[3]]);
    const T* plane = x + xv.offset + b * xv.stride[0] + c * xv.stride[1];
    const float v = grid_sample_at(gx, gy, h, w, p.nearest, padding, p.align_corners, [&](int iy, int ix) {
      return to_f32(plane[iy * xv.stride[2] + ix * xv.stride[3]]);
    });
    y[yv.offset + b * yv.stride[0] + c * yv.stride[1] + oy * yv.stride[2] + ox * yv.stride[3]] = from_f32<T>(v);
  }
}

}  // namespace

void gather_elements(DType type, void* y, const View& y_view, const void* x, const View& x_view, const void* indices,
                     const View& indices_view, bool indices_f32, int axis, cudaStream_t stream) {
  const std::int64_t n = y_view.elements();
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    if (indices_f32)
      gather_elements_kernel<T, float><<<grid_for(n), kBlock, 0, stream>>>(
          static_cast<T*>(y), y_view, static_cast<const T*>(x), x_view, static_cast<const float*>(indices),
          indices_view, axis, n);
    else
      gather_elements_kernel<T, T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(y), y_view,
                                                                       static_cast<const T*>(x), x_view,
                                                                       static_cast<const T*>(indices), indices_view,
                                                                       axis, n);
  });
  check_launch();
}

void grid_sample(DType type, const GridSampleParams& p, void* y, const View& y_view, const void* x,
                 const View& x_view, const void* grid, const View& grid_view, cudaStream_t stream) {
  const std::int64_t n = y_view.elements();
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    grid_sample_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(p, static_cast<T*>(y), y_view,
                                                              static_cast<const T*>(x), x_view,
                                                              static_cast<const T*>(grid), grid_view, n);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
