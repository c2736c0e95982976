// Attention Y = softmax(scale * Q K^T + M) V on tensor cores in FlashAttention-2's way, f16/bf16 with f32
// accumulation, sm_80 and later (mma.sync m16n8k16, ldmatrix, cp.async).
//  * A block of 4 warps takes 64 query rows of one flat batch; each warp owns 16 of them. The block's Q rows are
//    staged once in shared memory, and each warp keeps its Q operand fragments in registers.
//  * Keys and values go through shared memory 64 rows at a time, two stages: the next block's K and V are copied
//    (cp.async) while the warps work on the current one.
//  * Per key block each warp computes its 16 x 64 scores in registers, applies scale, bias and the key tail, updates
//    the running row maximum and sum (the online softmax), and adds P V to its output accumulator, also in
//    registers: the probabilities go from the scores' accumulator layout straight into the A operand layout.
// Shared rows are padded by 16 bytes, so the 8 row addresses of one ldmatrix fall in 8 different bank groups.
// Operands are read and written through row and batch strides (sequence-first ones in place); the bias M through
// its broadcast strides. Rows of Q past the end are zeros and never stored; keys past the end score -inf and
// their V rows are zeros (a 0 * garbage product could be NaN).
#include <cstring>
#include <type_traits>

#include "nn/cuda/attention_mask.cuh"
#include "nn/cuda/kernel_util.cuh"
#include "runtime/cuda_check.hpp"

namespace sluice::nn::cuda {
namespace {

constexpr int kWarps = 4, kQueryRows = 16 * kWarps, kKeyRows = 64;
constexpr int kRowPad = 8;  // elements: 16 bytes after each shared row

template <int D>
struct FlashTiles {
  static constexpr int stride = D + kRowPad;            // of a shared row, in elements
  static constexpr int q = kQueryRows * stride;         // the block's Q rows
  static constexpr int kv = kKeyRows * stride;          // one block of K (or V) rows
  static constexpr int elements = q + 2 * 2 * kv;       // Q, then K and V of each of the two stages
};

template <typename T>
struct FlashArgs {
  T* y;
  const T *q, *k, *v, *mask;
  AttentionShape shape;
  AttentionStrides strides;
  int row_blocks;     // blocks of kQueryRows per flat batch
  bool async_loads;   // Q, K and V rows 16-byte aligned: cp.async; otherwise element loads
  bool paired_stores; // Y 4-byte aligned: two outputs per store
};

// sm_80 instructions; targets below compile only a kernel that traps (and so none of these).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously; with `valid` false it writes 16 zero bytes (and reads
// nothing from src).
__device__ __forceinline__ void copy_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void commit_async_copies() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most `pending` of this thread's committed groups are still in flight.
template <int pending>
__device__ __forceinline__ void wait_async_copies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending) : "memory");
}

// Four 8x8 matrices of 16-bit elements; lanes 8i..8i+7 give the row addresses of matrix i, and register i of lane
// l receives row l/4, columns 2(l%4) and 2(l%4)+1 of matrix i (transposed: row 2(l%4) and 2(l%4)+1, column l/4).
__device__ __forceinline__ void load_matrices(std::uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address))
               : "memory");
}
__device__ __forceinline__ void load_matrices_transposed(std::uint32_t (&r)[4], const void* row_address) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(row_address))
               : "memory");
}

#endif

// d (16x8, f32) += a (16x16, row) . b (16x8, col). Fragments (PTX ISA, mma.m16n8k16): with g = lane / 4 and
// t = lane % 4, a holds rows g and g + 8 at columns 2t, 2t+1 (a[0], a[1]) and 2t+8, 2t+9 (a[2], a[3]); b holds
// column g at rows 2t, 2t+1 (b0) and 2t+8, 2t+9 (b1); d holds rows g (d[0], d[1]) and g + 8 (d[2], d[3]) at
// columns 2t, 2t+1.
template <typename T>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                            std::uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats as a pair of T in one register, `low` in the low half (the element of the lower column).
template <typename T>
__device__ __forceinline__ std::uint32_t pack_pair(float low, float high) {
  std::uint32_t bits;
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 pair = __floats2half2_rn(low, high);
    memcpy(&bits, &pair, sizeof bits);
  } else {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(low, high);
    memcpy(&bits, &pair, sizeof bits);
  }
  return bits;
}

// Rows first .. first + kRows - 1 of an operand (row r at src + r * row_stride, D elements) into shared rows of
// FlashTiles<D>::stride; rows at or past `valid` become zeros.
template <typename T, int D, int kRows>
__device__ __forceinline__ void stage_rows(T* dst, const T* src, std::int64_t row_stride, int first, int valid,
                                           bool async_loads) {
  constexpr int kPieces = D / 8;  // 16 bytes each
  static_assert(kRows * kPieces % (kWarps * 32) == 0, "every thread copies the same number of pieces");
#pragma unroll
  for (int step = 0; step < kRows * kPieces / (kWarps * 32); ++step) {
    const int i = step * kWarps * 32 + static_cast<int>(threadIdx.x);
    const int r = i / kPieces, c = (i % kPieces) * 8;
    const bool inside = first + r < valid;
    const T* from = inside ? src + (first + r) * row_stride + c : src;
    T* to = dst + r * FlashTiles<D>::stride + c;
    if (async_loads) {
      copy_async_16(to, from, inside);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) to[e] = inside ? from[e] : from_f32<T>(0.f);
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kWarps * 32) attention_flash_kernel(const FlashArgs<T> args) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // mma.m16n8k16, ldmatrix and cp.async start at sm_80; the host never picks this kernel below
#else
  using Tiles = FlashTiles<D>;
  constexpr int ld = Tiles::stride;
  extern __shared__ __align__(16) unsigned char shared[];
  T* q_s = reinterpret_cast<T*>(shared);
  T* kv_s = q_s + Tiles::q;  // stage i: K rows at kv_s + 2 i Tiles::kv, its V rows right after

  const AttentionShape& s = args.shape;
  const AttentionStrides& st = args.strides;
  const int batch = static_cast<int>(blockIdx.x / args.row_blocks);
  const int row0 = static_cast<int>(blockIdx.x % args.row_blocks) * kQueryRows;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = lane / 4, pair = lane % 4;  // the fragment coordinates g and t (mma_16x8x16)
  const T* q = args.q + st.q.start(batch, st.heads);
  const T* k = args.k + st.k.start(batch, st.heads);
  const T* v = args.v + st.v.start(batch, st.heads);

  stage_rows<T, D, kQueryRows>(q_s, q, st.q.row, row0, s.rows, args.async_loads);
  commit_async_copies();
  const int key_blocks = (s.keys + kKeyRows - 1) / kKeyRows;
  auto stage_keys = [&](int block, int stage) {
    T* k_s = kv_s + 2 * stage * Tiles::kv;
    stage_rows<T, D, kKeyRows>(k_s, k, st.k.row, block * kKeyRows, s.keys, args.async_loads);
    stage_rows<T, D, kKeyRows>(k_s + Tiles::kv, v, st.v.row, block * kKeyRows, s.keys, args.async_loads);
  };
  if (key_blocks > 0) stage_keys(0, 0);
  commit_async_copies();

  // This thread's two rows of the warp's 16: `group` and `group + 8`.
  const int warp_row0 = row0 + warp * 16;
  const bool warp_has_rows = warp_row0 < s.rows;  // uniform over the warp: a warp past the end only loads
  const int rows[2] = {warp_row0 + group, warp_row0 + group + 8};
  std::int64_t mask_row[2] = {0, 0};
  if (args.mask) {
    const std::int64_t base = attention_mask_offset(s, batch);
    for (int r = 0; r < 2; ++r) mask_row[r] = base + min(rows[r], s.rows - 1) * s.mask_row_stride;  // in bounds
  }

  std::uint32_t q_frag[D / 16][4];
  wait_async_copies<1>();  // Q has landed (K and V of block 0 may still be in flight)
  __syncthreads();
  if (warp_has_rows) {
    // Matrices 0..3 of each ldmatrix: rows 0-7 / 8-15 at columns +0, then the same at +8: a[0..3] in order.
#pragma unroll
    for (int c = 0; c < D / 16; ++c)
      load_matrices(q_frag[c], q_s + (warp * 16 + lane % 16) * ld + c * 16 + (lane / 16) * 8);
  }

  float out[D / 8][4];  // the output accumulator: 8-column tile j, in the mma d layout
#pragma unroll
  for (int j = 0; j < D / 8; ++j) out[j][0] = out[j][1] = out[j][2] = out[j][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.f, 0.f};  // this thread's share; the 4 threads of a row add theirs up at the end

  for (int block = 0; block < key_blocks; ++block) {
    const int stage = block & 1;
    if (block + 1 < key_blocks) {
      stage_keys(block + 1, stage ^ 1);  // that stage was last read in the previous iteration, before its barrier
      commit_async_copies();
      wait_async_copies<1>();
    } else {
      wait_async_copies<0>();
    }
    __syncthreads();
    if (warp_has_rows) {
      const T* k_s = kv_s + 2 * stage * Tiles::kv;
      const T* v_s = k_s + Tiles::kv;
      // Scores of the warp's 16 rows against the block's 64 keys: 8 tiles of 8 keys. B = K^T is K's rows as
      // stored (col layout); one ldmatrix gives keys +0-7 and +8-15 at columns +0 and +8.
      float score[kKeyRows / 8][4];
#pragma unroll
      for (int n = 0; n < kKeyRows / 8; ++n) score[n][0] = score[n][1] = score[n][2] = score[n][3] = 0.f;
#pragma unroll
      for (int c = 0; c < D / 16; ++c)
#pragma unroll
        for (int n = 0; n < kKeyRows / 16; ++n) {
          std::uint32_t b[4];
          load_matrices(b, k_s + (n * 16 + lane % 8 + (lane / 16) * 8) * ld + c * 16 + (lane / 8 % 2) * 8);
          mma_16x8x16<T>(score[2 * n], q_frag[c], b[0], b[1]);
          mma_16x8x16<T>(score[2 * n + 1], q_frag[c], b[2], b[3]);
        }
      // scale, bias, and -inf past the last key
      const int key0 = block * kKeyRows;
#pragma unroll
      for (int n = 0; n < kKeyRows / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int key = key0 + n * 8 + pair * 2 + (i & 1);
          float value = score[n][i] * s.scale;
          if (key >= s.keys) value = -INFINITY;
          else if (args.mask) value += to_f32(args.mask[mask_row[i / 2] + key * s.mask_key_stride]);
          score[n][i] = value;
        }
      // The online softmax: the new row maximum over this block (the 4 threads of a row share theirs).
      float block_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kKeyRows / 8; ++n) {
        block_max[0] = fmaxf(block_max[0], fmaxf(score[n][0], score[n][1]));
        block_max[1] = fmaxf(block_max[1], fmaxf(score[n][2], score[n][3]));
      }
      float base[2], rescale[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xffffffffu, block_max[r], 1));
        block_max[r] = fmaxf(block_max[r], __shfl_xor_sync(0xffffffffu, block_max[r], 2));
        const float new_max = fmaxf(row_max[r], block_max[r]);
        // A row whose keys are all -inf so far keeps base 0: exp(-inf - 0) = 0, never exp(-inf - -inf) = NaN.
        base[r] = new_max == -INFINITY ? 0.f : new_max;
        rescale[r] = __expf(row_max[r] - base[r]);
        row_max[r] = new_max;
        row_sum[r] *= rescale[r];
      }
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        out[j][0] *= rescale[0];
        out[j][1] *= rescale[0];
        out[j][2] *= rescale[1];
        out[j][3] *= rescale[1];
      }
#pragma unroll
      for (int n = 0; n < kKeyRows / 8; ++n)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          score[n][i] = __expf(score[n][i] - base[i / 2]);
          row_sum[i / 2] += score[n][i];
        }
      // out += P V. The A fragment of keys 16c..16c+15 is score tiles 2c and 2c+1 as they are; B = V's rows as
      // stored, transposed by ldmatrix: keys +0-7 / +8-15 at columns +0, then at columns +8.
#pragma unroll
      for (int c = 0; c < kKeyRows / 16; ++c) {
        const std::uint32_t a[4] = {pack_pair<T>(score[2 * c][0], score[2 * c][1]),
                                    pack_pair<T>(score[2 * c][2], score[2 * c][3]),
                                    pack_pair<T>(score[2 * c + 1][0], score[2 * c + 1][1]),
                                    pack_pair<T>(score[2 * c + 1][2], score[2 * c + 1][3])};
#pragma unroll
        for (int n = 0; n < D / 16; ++n) {
          std::uint32_t b[4];
          load_matrices_transposed(b, v_s + (c * 16 + lane % 8 + (lane / 8 % 2) * 8) * ld + n * 16 + (lane / 16) * 8);
          mma_16x8x16<T>(out[2 * n], a, b[0], b[1]);
          mma_16x8x16<T>(out[2 * n + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with this stage before the next iteration refills it
  }

  if (!warp_has_rows) return;
  float inverse[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    // A row whose every key is -inf has sum 0: its outputs are NaN (0 * inf), as the CPU twin's and ONNX
    // Runtime's softmax give.
    inverse[r] = 1.f / row_sum[r];
  }
  T* y = args.y + st.y.start(batch, st.heads);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= s.rows) continue;
    T* y_row = y + rows[r] * st.y.row;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int column = j * 8 + pair * 2;
      const float low = out[j][2 * r] * inverse[r], high = out[j][2 * r + 1] * inverse[r];
      if (args.paired_stores) {
        *reinterpret_cast<std::uint32_t*>(y_row + column) = pack_pair<T>(low, high);
      } else {
        y_row[column] = from_f32<T>(low);
        y_row[column + 1] = from_f32<T>(high);
      }
    }
  }
#endif
}

template <int D>
std::size_t flash_shared_bytes(std::size_t element) {
  return FlashTiles<D>::elements * element;
}

std::size_t flash_shared_bytes(int depth, std::size_t element) {
  switch (depth) {
    case 32: return flash_shared_bytes<32>(element);
    case 64: return flash_shared_bytes<64>(element);
    case 128: return flash_shared_bytes<128>(element);
  }
  return 0;
}

template <typename T, int D>
void launch_flash(const FlashArgs<T>& args, std::int64_t blocks, cudaStream_t stream) {
  const std::size_t bytes = flash_shared_bytes<D>(sizeof(T));
  CUDA_CHECK(cudaFuncSetAttribute(attention_flash_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(bytes)));
  attention_flash_kernel<T, D><<<static_cast<unsigned>(blocks), kWarps * 32, bytes, stream>>>(args);
  check_launch();
}

bool aligned(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

bool attention_flash_supported(DType type, int depth, int value_depth) {
  if (type == DType::f32 || type == DType::u8 || depth != value_depth || flash_shared_bytes(depth, 2) == 0)
    return false;
  int device = 0, major = 0, shared_optin = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  CUDA_CHECK(cudaDeviceGetAttribute(&shared_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return major >= 8 && flash_shared_bytes(depth, 2) <= static_cast<std::size_t>(shared_optin);
}

void attention_flash(DType type, void* y, const void* q, const void* k, const void* v, const void* mask,
                     const AttentionShape& s, const AttentionStrides& strides, cudaStream_t stream) {
  if (s.batches == 0 || s.rows == 0) return;
  if (!attention_flash_supported(type, s.depth, s.value_depth))
    throw std::invalid_argument("nn/cuda attention_flash: unsupported type, depths or device");
  const int row_blocks = (s.rows + kQueryRows - 1) / kQueryRows;
  const std::int64_t blocks = static_cast<std::int64_t>(row_blocks) * s.batches;
  if (blocks > 0x7fffffff) throw std::invalid_argument("nn/cuda attention_flash: more than 2^31 - 1 blocks");
  // Every row start 16-byte aligned: the strides are multiples of 8 elements and the pointers of 16 bytes.
  bool async_loads = aligned(q, 16) && aligned(k, 16) && aligned(v, 16);
  for (const AttentionOperandStrides& o : {strides.q, strides.k, strides.v})
    async_loads = async_loads && o.batch % 8 == 0 && o.row % 8 == 0 && o.skip % 8 == 0;
  const bool paired_stores = aligned(y, 4) && strides.y.batch % 2 == 0 && strides.y.row % 2 == 0 &&
                             strides.y.skip % 2 == 0;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, float>) {
      const FlashArgs<T> args{static_cast<T*>(y),          static_cast<const T*>(q),
                              static_cast<const T*>(k),    static_cast<const T*>(v),
                              static_cast<const T*>(mask), s,
                              strides,                     row_blocks,
                              async_loads,                 paired_stores};
      switch (s.depth) {
        case 32: launch_flash<T, 32>(args, blocks, stream); break;
        case 64: launch_flash<T, 64>(args, blocks, stream); break;
        case 128: launch_flash<T, 128>(args, blocks, stream); break;
      }
    }
  });
}

}  // namespace sluice::nn::cuda
