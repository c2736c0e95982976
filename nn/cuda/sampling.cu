// GatherElements: one thread an output element, every operand read through its View (so NHWC and row-major
// values alike), in nn/sampling_math.hpp's formula (the CPU layer's own).
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

}  // namespace sluice::nn::cuda
