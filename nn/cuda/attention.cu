// Attention: Y = softmax(scale * Q K^T + M) V in one kernel, the scores never written to memory (flash-attention's
// online softmax: each key tile rescales the running row maximum, sum and output); and the softmax step of the
// unfused way (two cuBLAS products around it, attention_layer.cpp).
//  * f16/bf16 with depths that are multiples of 16 up to 128: tensor cores (WMMA 16x16x16, f32 accumulation).
//    A block of 4 warps takes 64 query rows (16 per warp) and walks the keys 64 at a time through shared memory.
//  * otherwise (f32, other depths): one warp per query row on the CUDA cores, 32 keys at a time.
// Q [B, T, d], K [B, S, d], V [B, S, dv], Y [B, T, dv] contiguous; M through strides (0 where it broadcasts).
#include <mma.h>

#include <cfloat>
#include <type_traits>

#include "nn/cuda/attention_mask.cuh"
#include "nn/cuda/kernel_util.cuh"
#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {
namespace {

// ---- tensor cores -------------------------------------------------------------------------------------------
constexpr int kRows = 64, kKeys = 64, kWarps = 4;
// Shared-memory row strides, padded so that rows start in different banks (16 bytes of padding for the 16-bit
// tiles and the WMMA loads, 4 floats for the f32 ones); every WMMA pointer stays 32-byte aligned.
constexpr int kScoreStride = kKeys + 4, kProbStride = kKeys + 8;

struct TileStrides {
  int q, v, o;  // q: Q and K rows (depth + 8), v: V rows (value_depth + 8), o: output rows (value_depth + 4)
  __host__ __device__ explicit TileStrides(int depth, int value_depth)
      : q(depth + 8), v(value_depth + 8), o(value_depth + 4) {}
};

std::size_t wmma_shared_bytes(int depth, int value_depth, std::size_t element) {
  const TileStrides ld(depth, value_depth);
  return element * (static_cast<std::size_t>(kRows + kKeys) * ld.q + kKeys * ld.v + kWarps * 16 * kProbStride) +
         sizeof(float) * (kWarps * 16 * kScoreStride + kWarps * 16 * ld.o + 2 * kRows);
}

// Copies rows of `width` elements (a multiple of 8, rows 16-byte aligned) into shared rows of stride `ld`,
// 16 bytes per thread and access; rows at or past `valid` become zeros.
template <typename T>
__device__ __forceinline__ void load_tile(T* dst, int ld, const T* src, int rows, int valid, int width) {
  const int packs = width / 8;
  for (int i = threadIdx.x; i < rows * packs; i += blockDim.x) {
    const int r = i / packs, c = (i - r * packs) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + static_cast<std::int64_t>(r) * width + c);
    *reinterpret_cast<uint4*>(dst + r * ld + c) = v;
  }
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
  const TileStrides ld(depth, value_depth);
  T* q_s = reinterpret_cast<T*>(shared);            // [kRows][ld.q]
  T* k_s = q_s + kRows * ld.q;                       // [kKeys][ld.q]
  T* v_s = k_s + kKeys * ld.q;                       // [kKeys][ld.v]
  T* p_s = v_s + kKeys * ld.v;                       // [kWarps * 16][kProbStride] probabilities
  float* s_s = reinterpret_cast<float*>(p_s + kWarps * 16 * kProbStride);  // [kWarps * 16][kScoreStride] scores
  float* o_s = s_s + kWarps * 16 * kScoreStride;     // [kWarps * 16][ld.o] output accumulator
  float* max_s = o_s + kWarps * 16 * ld.o;           // [kRows] running maximum
  float* sum_s = max_s + kRows;                      // [kRows] running sum

  const int batch = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows;
  const T* kb = k + static_cast<std::int64_t>(batch) * s.keys * depth;
  const T* vb = v + static_cast<std::int64_t>(batch) * s.keys * value_depth;
  const std::int64_t mb = mask ? attention_mask_offset(s, batch) : 0;

  load_tile(q_s, ld.q, q + (static_cast<std::int64_t>(batch) * s.rows + row0) * depth, kRows, s.rows - row0, depth);
  for (int i = threadIdx.x; i < kWarps * 16 * ld.o; i += blockDim.x) o_s[i] = 0.f;
  for (int i = threadIdx.x; i < kRows; i += blockDim.x) {
    max_s[i] = -INFINITY;
    sum_s[i] = 0.f;
  }
  __syncthreads();

  for (int key0 = 0; key0 < s.keys; key0 += kKeys) {
    load_tile(k_s, ld.q, kb + static_cast<std::int64_t>(key0) * depth, kKeys, s.keys - key0, depth);
    load_tile(v_s, ld.v, vb + static_cast<std::int64_t>(key0) * value_depth, kKeys, s.keys - key0, value_depth);
    __syncthreads();
    // Scores of the warp's 16 rows against the 64 keys.
    for (int n = 0; n < kKeys / 16; ++n) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
      for (int c = 0; c < depth; c += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b;  // K^T: key-major rows of K
        wmma::load_matrix_sync(a, q_s + warp * 16 * ld.q + c, ld.q);
        wmma::load_matrix_sync(b, k_s + n * 16 * ld.q + c, ld.q);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(s_s + warp * 16 * kScoreStride + n * 16, acc, kScoreStride, wmma::mem_row_major);
    }
    __syncwarp();
    // Online softmax, one row at a time across the warp: lane j owns keys j and j + 32.
    for (int r = 0; r < 16; ++r) {
      const int row = warp * 16 + r, global_row = row0 + row;
      const float* scores = s_s + row * kScoreStride;
      float value[2];
      for (int h = 0; h < 2; ++h) {
        const int key = key0 + lane + 32 * h;
        value[h] = -INFINITY;
        if (key < s.keys) {
          value[h] = scores[lane + 32 * h] * s.scale;
          if (mask && global_row < s.rows)
            value[h] += to_f32(mask[mb + global_row * s.mask_row_stride + key * s.mask_key_stride]);
        }
      }
      const float old_max = max_s[row];
      const float new_max = fmaxf(old_max, warp_max(fmaxf(value[0], value[1])));
      const float base = new_max == -INFINITY ? 0.f : new_max;  // a row masked out so far stays all zero
      const float p0 = __expf(value[0] - base), p1 = __expf(value[1] - base);
      p_s[row * kProbStride + lane] = from_f32<T>(p0);
      p_s[row * kProbStride + lane + 32] = from_f32<T>(p1);
      const float tile_sum = warp_sum(p0 + p1);
      const float rescale = __expf(old_max - base);
      float* out = o_s + row * ld.o;
      for (int c = lane; c < value_depth; c += 32) out[c] *= rescale;
      if (lane == 0) {  // every lane read old_max before the warp_sum above
        max_s[row] = new_max;
        sum_s[row] = sum_s[row] * rescale + tile_sum;
      }
    }
    __syncwarp();
    // out += probs (16 x 64) . V (64 x value_depth)
    for (int n = 0; n < value_depth; n += 16) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, o_s + warp * 16 * ld.o + n, ld.o, wmma::mem_row_major);
      for (int j = 0; j < kKeys; j += 16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> b;
        wmma::load_matrix_sync(a, p_s + warp * 16 * kProbStride + j, kProbStride);
        wmma::load_matrix_sync(b, v_s + j * ld.v + n, ld.v);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(o_s + warp * 16 * ld.o + n, acc, ld.o, wmma::mem_row_major);
    }
    __syncthreads();
  }
  for (int r = 0; r < 16; ++r) {
    const int row = warp * 16 + r, global_row = row0 + row;
    if (global_row >= s.rows) break;
    const float inv = 1.f / sum_s[row];
    const float* out = o_s + row * ld.o;
    T* yr = y + (static_cast<std::int64_t>(batch) * s.rows + global_row) * value_depth;
    for (int c = lane; c < value_depth; c += 32) yr[c] = from_f32<T>(out[c] * inv);
  }
  }
}

// ---- the unfused way's softmax: one warp per row of scores --------------------------------------------------
template <typename T>
__global__ void attention_softmax_kernel(T* scores, const T* mask, AttentionShape s) {
  const int lane = threadIdx.x % 32;
  const std::int64_t rows = static_cast<std::int64_t>(s.batches) * s.rows;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  for (std::int64_t item = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32; item < rows;
       item += warps) {
    T* row = scores + item * s.keys;
    const std::int64_t mb =
        mask ? attention_mask_offset(s, static_cast<int>(item / s.rows)) + (item % s.rows) * s.mask_row_stride : 0;
    auto value = [&](int key) {
      float v = to_f32(row[key]) * s.scale;
      if (mask) v += to_f32(mask[mb + key * s.mask_key_stride]);
      return v;
    };
    float m = -INFINITY;
    for (int key = lane; key < s.keys; key += 32) m = fmaxf(m, value(key));
    m = warp_max(m);
    const float base = m == -INFINITY ? 0.f : m;
    float sum = 0.f;
    for (int key = lane; key < s.keys; key += 32) sum += __expf(value(key) - base);
    const float inv = 1.f / warp_sum(sum);
    for (int key = lane; key < s.keys; key += 32) row[key] = from_f32<T>(__expf(value(key) - base) * inv);
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
  const std::int64_t mb = mask ? attention_mask_offset(s, batch) + row * s.mask_row_stride : 0;
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
    const float tile_max = warp_max(score);
    const float new_max = fmaxf(running_max, tile_max);
    const float base = new_max == -INFINITY ? 0.f : new_max;
    const float p = __expf(score - base);
    const float tile_sum = warp_sum(p);
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

void attention_softmax(DType type, void* scores, const void* mask, const AttentionShape& s, cudaStream_t stream) {
  const std::int64_t rows = static_cast<std::int64_t>(s.batches) * s.rows;
  if (rows == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    attention_softmax_kernel<T><<<grid_for(rows * 32), kBlock, 0, stream>>>(static_cast<T*>(scores),
                                                                            static_cast<const T*>(mask), s);
  });
  check_launch();
}

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
      const bool aligned = (reinterpret_cast<std::uintptr_t>(q) | reinterpret_cast<std::uintptr_t>(k) |
                            reinterpret_cast<std::uintptr_t>(v)) % 16 == 0;
      if (aligned && tensor_cores_fit(type, s)) {
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
