// ArgMax, ArgMin and TopK over rows along one axis, compared in f32 in nn/ranking.hpp's order (a total order, so
// results do not depend on thread timing). ArgMax/ArgMin: one thread a row. TopK: one thread an element, which
// counts the row's elements that come before it; that count is its place in the sorted output.
#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// Offsets of a row's first element in x, values and indices.
struct RowStart {
  std::int64_t x = 0, values = 0, indices = 0;
};
__device__ __forceinline__ RowStart row_start(std::int64_t row, const AxisRows& r) {
  RowStart s;
  for (int d = r.rank - 1; d >= 0; --d) {
    const std::int64_t q = row / r.shape[d], i = row - q * r.shape[d];
    s.x += i * r.x_stride[d];
    s.values += i * r.values_stride[d];
    s.indices += i * r.indices_stride[d];
    row = q;
  }
  return s;
}

template <typename T>
__global__ void arg_extreme_kernel(T* indices, const T* x, AxisRows r, std::int64_t rows, RankOrder order) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; row < rows; row += step) {
    const RowStart s = row_start(row, r);
    const T* in = x + s.x;
    std::int64_t best = 0;
    float best_value = to_f32(in[0]);
    for (std::int64_t k = 1; k < r.length; ++k) {
      const float v = to_f32(in[k * r.x_axis_stride]);
      if (comes_before(v, k, best_value, best, order)) {
        best = k;
        best_value = v;
      }
    }
    indices[s.indices] = from_f32<T>(static_cast<float>(best));
  }
}

template <typename T>
__global__ void top_k_kernel(T* values, T* indices, const T* x, AxisRows r, std::int64_t elements, std::int64_t k,
                             RankOrder order) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < elements; e += step) {
    const std::int64_t row = e / r.length, j = e - row * r.length;
    const RowStart s = row_start(row, r);
    const T* in = x + s.x;
    const float v = to_f32(in[j * r.x_axis_stride]);
    std::int64_t place = 0;
    for (std::int64_t i = 0; i < r.length && place < k; ++i)
      place += comes_before(to_f32(in[i * r.x_axis_stride]), i, v, j, order);
    if (place >= k) continue;
    values[s.values + place * r.values_axis_stride] = in[j * r.x_axis_stride];
    indices[s.indices + place * r.indices_axis_stride] = from_f32<T>(static_cast<float>(j));
  }
}

}  // namespace

void arg_extreme(DType type, void* indices, const void* x, const AxisRows& rows, RankOrder order, cudaStream_t stream) {
  const std::int64_t n = rows.rows();
  if (n == 0 || rows.length == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    arg_extreme_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(indices), static_cast<const T*>(x),
                                                              rows, n, order);
  });
  check_launch();
}

void top_k(DType type, void* values, void* indices, const void* x, const AxisRows& rows, std::int64_t k,
           RankOrder order, cudaStream_t stream) {
  const std::int64_t elements = rows.rows() * rows.length;
  if (elements == 0 || k == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    top_k_kernel<T><<<grid_for(elements), kBlock, 0, stream>>>(static_cast<T*>(values), static_cast<T*>(indices),
                                                               static_cast<const T*>(x), rows, elements, k, order);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
