// Attention: Y = softmax(scale * Q K^T + M) V in one kernel, the scores never written to memory (flash-attention's
// online softmax: each key tile rescales the running row maximum, sum and output).
//  * f16/bf16 with depths that are multiples of 16 up to 128: tensor cores (WMMA 16x16x16, f32 accumulation).
//    A block of 4 warps takes 64 query rows (16 per warp) and walks the keys 64 at a time through shared memory.
//  * otherwise (f32, other depths): one warp per query row on the CUDA cores, 32 keys at a time.
// Q [B, T, d], K [B, S, d], V [B, S, dv], Y [B, T, dv] contiguous; M through strides (0 where it broadcasts).
#include <mma.h>

#include <cfloat>
#include <type_traits>

#include "nn/cuda/kernel_util.cuh"
#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {
namespace {

__device__ __forceinline__ std::int64_t mask_base(const AttentionShape& s, int batch) {
  std::int64_t offset = 0;
  for (int d = s.batch_rank - 1; d >= 0; --d) {
    offset += (batch % s.batch_shape[d]) * s.mask_batch_stride[d];
    batch /= s.batch_shape[d];
  }
  return offset;
}

// ---- tensor cores -------------------------------------------------------------------------------------------
constexpr int kRows = 64, kKeys = 64, kWarps = 4;

std::size_t wmma_shared_bytes(int depth, int value_depth, std::size_t element) {
  return element * (kRows * depth + kKeys * depth + kKeys * value_depth + kWarps * 16 * kKeys) +
         sizeof(float) * (kWarps * 16 * kKeys + kWarps * 16 * value_depth + 2 * kRows);
}

template <typename T>
__global__ void __launch_bounds__(kWarps * 32) attention_wmma_kernel(T* y, const T* q, const T* k, const T* v,
                                                                    const T* mask, AttentionShape s) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __trap();  // bf16 tensor cores start at sm_80; the host never picks this kernel below that
  } else
#endif
  {
  using namespace nvcuda;
  extern __shared__ __align__(128) unsigned char shared[];
  const int depth = s.depth, value_depth = s.value_depth;
  T* q_s = reinterpret_cast<T*>(shared);          // [kRows][depth]
  T* k_s = q_s + kRows * depth;                    // [kKeys][depth]
  T* v_s = k_s + kKeys * depth;                    // [kKeys][value_depth]
  T* p_s = v_s + kKeys * value_depth;              // [kWarps][16][kKeys] probabilities
  float* s_s = reinterpret_cast<float*>(p_s + kWarps * 16 * kKeys);  // [kWarps][16][kKeys] scores
  float* o_s = s_s + kWarps * 16 * kKeys;          // [kWarps][16][value_depth] output accumulator
  float* max_s = o_s + kWarps * 16 * value_depth;  // [kRows] running maximum
  float* sum_s = max_s + kRows;                    // [kRows] running sum

  const int batch = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows;
  const T* qb = q + static_cast<std::int64_t>(batch) * s.rows * depth;
  const T* kb = k + static_cast<std::int64_t>(batch) * s.keys * depth;
  const T* vb = v + static_cast<std::int64_t>(batch) * s.keys * value_depth;
  const std::int64_t mb = mask ? mask_base(s, batch) : 0;

  for (int i = threadIdx.x; i < kRows * depth; i += blockDim.x) {
    const int r = i / depth, c = i % depth;
    q_s[i] = row0 + r < s.rows ? qb[static_cast<std::int64_t>(row0 + r) * depth + c] : from_f32<T>(0.f);
  }
  for (int i = threadIdx.x; i < kWarps * 16 * value_depth; i += blockDim.x) o_s[i] = 0.f;
  for (int i = threadIdx.x; i < kRows; i += blockDim.x) {
    max_s[i] = -INFINITY;
    sum_s[i] = 0.f;
  }
  __syncthreads();

  // Each lane pair owns one of the warp's 16 rows, each lane half of its 64 scores and half of its outputs.
  const int r = lane / 2, half = lane % 2, row = warp * 16 + r, global_row = row0 + row;
  float* scores = s_s + (warp * 16 + r) * kKeys;
  T* probs = p_s + (warp * 16 + r) * kKeys;
  float* out = o_s + (warp * 16 + r) * value_depth;
  for (int key0 = 0; key0 < s.keys; key0 += kKeys) {
    for (int i = threadIdx.x; i < kKeys * depth; i += blockDim.x) {
      const int j = i / depth, c = i % depth;
      k_s[i] = key0 + j < s.keys ? kb[static_cast<std::int64_t>(key0 + j) * depth + c] : from_f32<T>(0.f);
    }
    for (int i = threadIdx.x; i < kKeys * value_depth; i += blockDim.x) {
      const int j = i / value_depth, c = i % value_depth;
      v_s[i] = key0 + j < s.keys ? vb[static_cast<std::int64_t>(key0 + j) * value_depth + c] : from_f32<T>(0.f);
    }
    __syncthreads();
    // Scores of the warp's 16 rows against the 64 keys.
    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int c = 0; c < depth; c += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;  // K^T: key-major rows of K
        wmma::load_matrix_sync(a, q_s + warp * 16 * depth + c, depth);
        wmma::load_matrix_sync(b, k_s + n * 16 * depth + c, depth);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_s + warp * 16 * kKeys + n * 16, acc, kKeys, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax over this tile, per row.
    float tile_max = -INFINITY;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const int key = key0 + j;
      float value = -INFINITY;
      if (key < s.keys) {
        value = scores[j] * s.scale;
        if (mask && global_row < s.rows)
          value += to_f32(mask[mb + global_row * s.mask_row_stride + key * s.mask_key_stride]);
      }
      scores[j] = value;
      tile_max = fmaxf(tile_max, value);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float old_max = max_s[row];
    const float new_max = fmaxf(old_max, tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max;  // a row masked out so far stays all zero
    float tile_sum = 0.f;
    for (int j = half * 32; j < half * 32 + 32; ++j) {
      const float p = __expf(scores[j] - base);
      tile_sum += p;
      probs[j] = from_f32<T>(p);
    }
    tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, 1);
    const float rescale = __expf(old_max - base);
    __syncwarp();
    if (half == 0) {
      max_s[row] = new_max;
      sum_s[row] = sum_s[row] * rescale + tile_sum;
    }
    for (int c = half; c < value_depth; c += 2) out[c] *= rescale;
    __syncwarp();
    // out += probs (16 x 64) . V (64 x value_depth)
    for (int n = 0; n < value_depth; n += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_s + warp * 16 * value_depth + n, value_depth, wmma::mem_row_major);
      for (int j = 0; j < kKeys; j += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_s + warp * 16 * kKeys + j, kKeys);
        wmma::load_matrix_sync(b, v_s + j * value_depth + n, value_depth);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_s + warp * 16 * value_depth + n, acc, value_depth, wmma::mem_row_major);
    }
    __syncthreads();
  }
  if (global_row < s.rows) {
    const float inv = 1.f / sum_s[row];
    T* yr = y + (static_cast<std::int64_t>(batch) * s.rows + global_row) * value_depth;
    for (int c = half; c < value_depth; c += 2) yr[c] = from_f32<T>(out[c] * inv);
  }
  }
}

// ---- CUDA cores: one warp per query row ----------------------------------------------------------------------
constexpr int kMaxValueDepth = 256;

template <typename T>
__global__ void attention_rows_kernel(T* y, const T* q, const T* k, const T* v, const T* mask, AttentionShape s) {
  extern __shared__ float q_rows[];  // [warps][depth] in f32
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * warps + warp;
  if (item >= static_cast<std::int64_t>(s.batches) * s.rows) return;
  const int batch = static_cast<int>(item / s.rows), row = static_cast<int>(item % s.rows);
  float* qr = q_rows + warp * s.depth;
  for (int c = lane; c < s.depth; c += 32) qr[c] = to_f32(q[item * s.depth + c]);
  __syncwarp();
  const T* kb = k + static_cast<std::int64_t>(batch) * s.keys * s.depth;
  const T* vb = v + static_cast<std::int64_t>(batch) * s.keys * s.value_depth;
  const std::int64_t mb = mask ? mask_base(s, batch) + row * s.mask_row_stride : 0;
  float acc[kMaxValueDepth / 32];
  for (auto& a : acc) a = 0.f;
  float running_max = -INFINITY, running_sum = 0.f;
  for (int key0 = 0; key0 < s.keys; key0 += 32) {
    const int key = key0 + lane;
    float score = -INFINITY;
    if (key < s.keys) {
      const T* kr = kb + static_cast<std::int64_t>(key) * s.depth;
      float dot = 0.f;
      for (int c = 0; c < s.depth; ++c) dot += qr[c] * to_f32(kr[c]);
      score = dot * s.scale + (mask ? to_f32(mask[mb + key * s.mask_key_stride]) : 0.f);
    }
    float tile_max = score;
    for (int o = 16; o > 0; o >>= 1) tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, o));
    const float new_max = fmaxf(running_max, tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max;
    const float p = __expf(score - base);
    float tile_sum = p;
    for (int o = 16; o > 0; o >>= 1) tile_sum += __shfl_xor_sync(0xffffffffu, tile_sum, o);
    const float rescale = __expf(running_max - base);
    running_sum = running_sum * rescale + tile_sum;
    running_max = new_max;
    const int tile = min(32, s.keys - key0);
#pragma unroll
    for (int i = 0; i < kMaxValueDepth / 32; ++i) acc[i] *= rescale;
    for (int j = 0; j < tile; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const T* vr = vb + static_cast<std::int64_t>(key0 + j) * s.value_depth;
#pragma unroll
      for (int i = 0; i < kMaxValueDepth / 32; ++i) {
        const int c = lane + 32 * i;
        if (c < s.value_depth) acc[i] += pj * to_f32(vr[c]);
      }
    }
  }
  T* yr = y + item * s.value_depth;
#pragma unroll
  for (int i = 0; i < kMaxValueDepth / 32; ++i) {
    const int c = lane + 32 * i;
    if (c < s.value_depth) yr[c] = from_f32<T>(acc[i] / running_sum);
  }
}

bool tensor_cores_fit(DType type, const AttentionShape& s) {
  if (type == DType::f32 || s.batches > 65535 || s.depth % 16 != 0 || s.value_depth % 16 != 0 || s.depth > 128 || s.value_depth > 128)
    return false;
  int device = 0, major = 0, shared_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (major < (type == DType::bf16 ? 8 : 7)) return false;
  return wmma_shared_bytes(s.depth, s.value_depth, dtype_bytes(type)) <= static_cast<std::size_t>(shared_optin);
}

}  // namespace

bool attention_uses_tensor_cores(DType type, const AttentionShape& shape) { return tensor_cores_fit(type, shape); }

void attention(DType type, void* y, const void* q, const void* k, const void* v, const void* mask,
               const AttentionShape& s, cudaStream_t stream) {
  if (s.batches == 0 || s.rows == 0) return;
  if (s.value_depth > kMaxValueDepth) throw std::invalid_argument("nn/cuda attention: value depth above 256");
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<T*>(y);
    const auto *qt = static_cast<const T*>(q), *kt = static_cast<const T*>(k), *vt = static_cast<const T*>(v),
               *mt = static_cast<const T*>(mask);
    if constexpr (!std::is_same_v<T, float>) {
      if (tensor_cores_fit(type, s)) {
        const std::size_t bytes = wmma_shared_bytes(s.depth, s.value_depth, sizeof(T));
        CUDA_CHECK(cudaFuncSetAttribute(attention_wmma_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(bytes)));
        const dim3 grid(static_cast<unsigned>((s.rows + kRows - 1) / kRows), static_cast<unsigned>(s.batches));
        attention_wmma_kernel<T><<<grid, kWarps * 32, bytes, stream>>>(out, qt, kt, vt, mt, s);
        check_launch();
        return;
      }
    }
    constexpr int kRowWarps = 4;
    const std::int64_t items = static_cast<std::int64_t>(s.batches) * s.rows;
    const auto blocks = static_cast<unsigned>((items + kRowWarps - 1) / kRowWarps);
    attention_rows_kernel<T><<<blocks, kRowWarps * 32, kRowWarps * s.depth * sizeof(float), stream>>>(out, qt, kt, vt,
                                                                                                      mt, s);
    check_launch();
  });
}

}  // namespace sluice::nn::cuda
