// Reductions and LayerNormalization over the rows of a RowSpace, accumulated in f32 whatever the element type.
// A row whose elements are contiguous (stride 1 in x, and in y for LayerNormalization) gets one warp, reading
// coalesced and combining with shuffles; any other row one thread, the rows ordered so that neighbouring threads
// read neighbouring addresses (a mean over H and W of NHWC data: threads along C).
#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

__device__ __forceinline__ float warp_combine(ReduceMath op, float v) {
  for (int o = 16; o > 0; o >>= 1) v = reduce_combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

struct RowOffsets {
  std::int64_t x, y;
};

// Offsets in x and y of linear index i over dims (shape, x stride, y stride), row-major.
__device__ __forceinline__ RowOffsets offsets_of(std::int64_t i, int rank, const std::int64_t* shape,
                                                 const std::int64_t* x_stride, const std::int64_t* y_stride) {
  RowOffsets o{0, 0};
  for (int d = rank - 1; d >= 0; --d) {
    const std::int64_t q = i / shape[d];
    const std::int64_t c = i - q * shape[d];
    o.x += c * x_stride[d];
    o.y += c * y_stride[d];
    i = q;
  }
  return o;
}

__device__ __forceinline__ RowOffsets row_start(const RowSpace& s, std::int64_t row) {
  return offsets_of(row, s.kept_rank, s.kept_shape, s.kept_x_stride, s.kept_y_stride);
}

__device__ __forceinline__ RowOffsets element_offset(const RowSpace& s, std::int64_t r) {
  return offsets_of(r, s.reduced_rank, s.reduced_shape, s.reduced_x_stride, s.reduced_y_stride);
}

template <typename T>
__global__ void reduce_warp_rows_kernel(ReduceMath op, T* y, const T* x, RowSpace s, std::int64_t rows, std::int64_t len) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const RowOffsets at = row_start(s, r);
    float acc = reduce_start(op);
    for (std::int64_t k = lane; k < len; k += 32) acc = reduce_step(op, acc, to_f32(x[at.x + k]));
    acc = warp_combine(op, acc);
    if (lane == 0) y[at.y] = from_f32<T>(reduce_finish(op, acc, static_cast<float>(len)));
  }
}

template <typename T>
__global__ void reduce_thread_rows_kernel(ReduceMath op, T* y, const T* x, RowSpace s, std::int64_t rows, std::int64_t len) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows; r += step) {
    const RowOffsets at = row_start(s, r);
    float acc = reduce_start(op);
    for (std::int64_t k = 0; k < len; ++k) acc = reduce_step(op, acc, to_f32(x[at.x + element_offset(s, k).x]));
    y[at.y] = from_f32<T>(reduce_finish(op, acc, static_cast<float>(len)));
  }
}

template <typename T>
__global__ void layer_norm_warp_rows_kernel(T* y, const T* x, RowSpace s, std::int64_t rows, std::int64_t len,
                                            const float* scale, const float* bias, float epsilon) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const RowOffsets at = row_start(s, r);
    const T* in = x + at.x;
    T* out = y + at.y;
    float sum = 0.f;
    for (std::int64_t k = lane; k < len; k += 32) sum += to_f32(in[k]);
    const float mean = warp_combine(ReduceMath::sum, sum) / static_cast<float>(len);
    float squares = 0.f;
    for (std::int64_t k = lane; k < len; k += 32) {
      const float d = to_f32(in[k]) - mean;
      squares += d * d;
    }
    const float inv = rsqrtf(warp_combine(ReduceMath::sum, squares) / static_cast<float>(len) + epsilon);
    for (std::int64_t k = lane; k < len; k += 32)
      out[k] = from_f32<T>((to_f32(in[k]) - mean) * inv * scale[k] + (bias ? bias[k] : 0.f));
  }
}

template <typename T>
__global__ void layer_norm_thread_rows_kernel(T* y, const T* x, RowSpace s, std::int64_t rows, std::int64_t len,
                                              const float* scale, const float* bias, float epsilon) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; r < rows; r += step) {
    const RowOffsets at = row_start(s, r);
    float sum = 0.f;
    for (std::int64_t k = 0; k < len; ++k) sum += to_f32(x[at.x + element_offset(s, k).x]);
    const float mean = sum / static_cast<float>(len);
    float squares = 0.f;
    for (std::int64_t k = 0; k < len; ++k) {
      const float d = to_f32(x[at.x + element_offset(s, k).x]) - mean;
      squares += d * d;
    }
    const float inv = rsqrtf(squares / static_cast<float>(len) + epsilon);
    for (std::int64_t k = 0; k < len; ++k) {
      const RowOffsets e = element_offset(s, k);
      y[at.y + e.y] = from_f32<T>((to_f32(x[at.x + e.x]) - mean) * inv * scale[k] + (bias ? bias[k] : 0.f));
    }
  }
}

bool contiguous_rows(const RowSpace& s, bool in_y) {
  return s.reduced_rank == 1 && s.reduced_x_stride[0] == 1 && (!in_y || s.reduced_y_stride[0] == 1);
}

}  // namespace

std::int64_t RowSpace::rows() const {
  std::int64_t n = 1;
  for (int d = 0; d < kept_rank; ++d) n *= kept_shape[d];
  return n;
}

std::int64_t RowSpace::row_length() const {
  std::int64_t n = 1;
  for (int d = 0; d < reduced_rank; ++d) n *= reduced_shape[d];
  return n;
}

void reduce(DType type, ReduceMath op, void* y, const void* x, const RowSpace& rows, cudaStream_t stream) {
  const std::int64_t count = rows.rows(), len = rows.row_length();
  if (count == 0 || len == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<T*>(y);
    const auto* in = static_cast<const T*>(x);
    if (contiguous_rows(rows, false))
      reduce_warp_rows_kernel<T><<<grid_for(count * 32), kBlock, 0, stream>>>(op, out, in, rows, count, len);
    else
      reduce_thread_rows_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(op, out, in, rows, count, len);
  });
  check_launch();
}

void layer_norm(DType type, void* y, const void* x, const RowSpace& rows, const float* scale, const float* bias,
                float epsilon, cudaStream_t stream) {
  const std::int64_t count = rows.rows(), len = rows.row_length();
  if (count == 0 || len == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<T*>(y);
    const auto* in = static_cast<const T*>(x);
    if (contiguous_rows(rows, true))
      layer_norm_warp_rows_kernel<T><<<grid_for(count * 32), kBlock, 0, stream>>>(out, in, rows, count, len, scale,
                                                                                  bias, epsilon);
    else
      layer_norm_thread_rows_kernel<T><<<grid_for(count), kBlock, 0, stream>>>(out, in, rows, count, len, scale,
                                                                              bias, epsilon);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
