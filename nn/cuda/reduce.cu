// Reductions and LayerNormalization over the rows of a RowSpace, accumulated in f32 whatever the element type.
// A row whose elements are contiguous (stride 1 in x, and in y for LayerNormalization) gets one warp, reading
// coalesced and combining with shuffles (LayerNormalization of rows of whole aligned 16-byte packs, up to 256
// packs: a group of lanes a row, the row held in registers, layer_norm_pack_rows_kernel); any other row one
// thread, the rows ordered so that neighbouring threads read neighbouring addresses (a mean over H and W of NHWC
// data: threads along C).
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

// The sum of v over each group of G consecutive lanes (G a power of two), in every lane of the group. Every lane
// of the warp takes part.
template <int G>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = G / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// LayerNormalization of rows whose elements are contiguous in x and y, a multiple of 16 bytes long and 16-byte
// aligned (rows, scale and bias): G lanes a row, lane g holding packs g, g + G, .. (at most N) of 16 bytes in
// registers, so the row is read once and written once with vector accesses. The same two passes in f32 as
// layer_norm_warp_rows_kernel (the mean, then the sum of squared deviations from it), over the registers.
template <typename T, int G, int N>
__global__ void __launch_bounds__(kBlock) layer_norm_pack_rows_kernel(T* y, const T* x, RowSpace s, std::int64_t rows,
                                                                      int len, const float* scale, const float* bias,
                                                                      float epsilon) {
  constexpr int V = 16 / sizeof(T), kRowsPerWarp = 32 / G;
  const int packs = len / V, lane = threadIdx.x % 32, g = lane % G;
  const std::int64_t warp = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  // The whole warp goes round the loop together (its lanes shuffle); a group past the last row only idles.
  for (std::int64_t first = warp * kRowsPerWarp; first < rows; first += warps * kRowsPerWarp) {
    const std::int64_t r = first + lane / G;
    const bool live = r < rows;
    const RowOffsets at = !live               ? RowOffsets{0, 0}
                          : s.kept_rank == 1 ? RowOffsets{r * s.kept_x_stride[0], r * s.kept_y_stride[0]}
                                             : row_start(s, r);
    uint4 raw[N];  // the row's packs as loaded (converted again in each pass: fewer registers, more threads)
    float sum = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int p = j * G + g;
      if (!live || p >= packs) continue;
      raw[j] = *reinterpret_cast<const uint4*>(x + at.x + p * V);
      const T* e = reinterpret_cast<const T*>(&raw[j]);
#pragma unroll
      for (int i = 0; i < V; ++i) sum += to_f32(e[i]);
    }
    const float mean = group_sum<G>(sum) / static_cast<float>(len);
    float squares = 0.f;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      if (!live || j * G + g >= packs) continue;
      const T* e = reinterpret_cast<const T*>(&raw[j]);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = to_f32(e[i]) - mean;
        squares += d * d;
      }
    }
    const float inv = rsqrtf(group_sum<G>(squares) / static_cast<float>(len) + epsilon);
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const int p = j * G + g;
      if (!live || p >= packs) continue;
      float sc[V], bi[V];
#pragma unroll
      for (int i = 0; i < V; i += 4) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(scale + p * V + i));
        const float4 b =
            bias ? __ldg(reinterpret_cast<const float4*>(bias + p * V + i)) : make_float4(0.f, 0.f, 0.f, 0.f);
        sc[i] = a.x, sc[i + 1] = a.y, sc[i + 2] = a.z, sc[i + 3] = a.w;
        bi[i] = b.x, bi[i + 1] = b.y, bi[i + 2] = b.z, bi[i + 3] = b.w;
      }
      const T* e = reinterpret_cast<const T*>(&raw[j]);
      uint4 out;
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int i = 0; i < V; ++i) o[i] = from_f32<T>((to_f32(e[i]) - mean) * inv * sc[i] + bi[i]);
      *reinterpret_cast<uint4*>(y + at.y + p * V) = out;
    }
  }
}

// The packs of 16 bytes a lane of layer_norm_pack_rows_kernel holds at most, and the longest row it takes.
constexpr int kPacksPerLane = 4, kMostPacksPerLane = 8;
constexpr std::int64_t kMostPacksPerRow = 32 * kMostPacksPerLane;

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The kept dims merged where a row's successor along one is its successor along the next, in x and in y (a
// contiguous [N, H, W, C] normalized over C: one dim of N*H*W rows), so that row_start divides less.
RowSpace merged_rows(const RowSpace& s) {
  RowSpace out = s;
  out.kept_rank = 0;
  for (int d = 0; d < s.kept_rank; ++d) {
    const int last = out.kept_rank - 1;
    if (last >= 0 && out.kept_x_stride[last] == s.kept_x_stride[d] * s.kept_shape[d] &&
        out.kept_y_stride[last] == s.kept_y_stride[d] * s.kept_shape[d]) {
      out.kept_shape[last] *= s.kept_shape[d];
      out.kept_x_stride[last] = s.kept_x_stride[d];
      out.kept_y_stride[last] = s.kept_y_stride[d];
      continue;
    }
    out.kept_shape[out.kept_rank] = s.kept_shape[d];
    out.kept_x_stride[out.kept_rank] = s.kept_x_stride[d];
    out.kept_y_stride[out.kept_rank] = s.kept_y_stride[d];
    ++out.kept_rank;
  }
  return out;
}

template <typename T, int G, int N>
void launch_layer_norm_packs(T* y, const T* x, const RowSpace& s, std::int64_t rows, std::int64_t len,
                             const float* scale, const float* bias, float epsilon, cudaStream_t stream) {
  layer_norm_pack_rows_kernel<T, G, N><<<grid_for(rows * G), kBlock, 0, stream>>>(
      y, x, merged_rows(s), rows, static_cast<int>(len), scale, bias, epsilon);
}

// Runs layer_norm_pack_rows_kernel when the rows fit it (contiguous, whole aligned packs, short enough); G is the
// smallest group that leaves each lane at most kPacksPerLane packs (96 f16: 12 packs, G = 4; 768 f16: G = 32),
// up to 32 lanes with kMostPacksPerLane.
template <typename T>
bool layer_norm_packs(T* y, const T* x, const RowSpace& s, std::int64_t rows, std::int64_t len, const float* scale,
                      const float* bias, float epsilon, cudaStream_t stream) {
  constexpr std::int64_t V = 16 / sizeof(T);
  if (s.reduced_rank != 1 || s.reduced_x_stride[0] != 1 || s.reduced_y_stride[0] != 1) return false;
  if (len % V != 0 || len / V > kMostPacksPerRow) return false;
  if (!aligned16(x) || !aligned16(y) || !aligned16(scale) || (bias && !aligned16(bias))) return false;
  for (int d = 0; d < s.kept_rank; ++d)
    if (s.kept_x_stride[d] % V != 0 || s.kept_y_stride[d] % V != 0) return false;
  const std::int64_t packs = len / V;
  auto fits = [&](std::int64_t g) { return packs <= g * kPacksPerLane; };
  if (fits(1)) launch_layer_norm_packs<T, 1, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else if (fits(2)) launch_layer_norm_packs<T, 2, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else if (fits(4)) launch_layer_norm_packs<T, 4, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else if (fits(8)) launch_layer_norm_packs<T, 8, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else if (fits(16)) launch_layer_norm_packs<T, 16, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else if (fits(32)) launch_layer_norm_packs<T, 32, kPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  else launch_layer_norm_packs<T, 32, kMostPacksPerLane>(y, x, s, rows, len, scale, bias, epsilon, stream);
  return true;
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
    if (layer_norm_packs(out, in, rows, count, len, scale, bias, epsilon, stream)) return;
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
