#include "kernels/preprocess.cuh"

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/half.hpp"
#include "kernels/preprocess_cpu.hpp"  // validate()
#include "kernels/roi_crop.cuh"
#include "kernels/roi_crop_cpu.hpp"  // validate_roi_crop()
#include "runtime/cuda_check.hpp"

// Shape of the kernel (one launch per batch):
//
// - A block of 256 threads owns one output tile of one batch item at a time: whole rows when the output is at
//   most 1024 wide (about 1024 pixels: 224 wide -> 224x4), else a single row segment of at most 1024 pixels.
//   Block z strides over the batch; the tap tables below do not depend on the item, so they are built once per
//   block and reused for every item it handles. In ROI mode (roi_crop_gpu: a crop per item, read from device
//   memory) they do, and each item rebuilds them: tw + th entries against tw * th pixels, small either way.
// - Tap tables in shared memory: for each column and row of the tile, the two source neighbours (as byte offsets,
//   crop included) and the weight, luma and (YUV) chroma, or a pad marker for letterbox borders. Built without
//   any division in the per-pixel path and without 64-bit integer division at all (a double reciprocal plus an
//   exact integer fix-up), to the same integers and the same correctly rounded float weights as the CPU twin.
// - Compute: consecutive threads take consecutive pixels of the tile (row-major), so each warp's byte loads
//   (__ldg, read-only path) of one tap fall in a few cache lines of two source rows. Results are normalised,
//   converted to the output type and written to a shared-memory staging copy of the tile's destination: one
//   contiguous run for NHWC or gray (the tile's rows are adjacent in the tensor), three runs for NCHW.
// - Store: each run is copied out with 16-byte vector stores (4 f32 or 8 f16/bf16 values; NHWC f16 224x224:
//   the 2688-element tile is 336 stores, fully coalesced). A run's staging copy sits at the same offset modulo
//   16 bytes as its destination, so any output width, batch item or plane start works: only the at most 7
//   elements before the first and after the last 16-byte boundary of a run are stored one by one.
//
// Memory traffic for 1080p bgr8 -> 224x224 f16 nhwc, batch 32: writes 9.6 MB once (full 32-byte sectors); reads
// two source rows per output row where the sampled columns fall (~25.7 bytes apart at this scale, so close to
// every sector of those rows): about 32*224*2*5760 bytes = 83 MB of the 199 MB batch, from DRAM at most once
// per sector. Both are far from the H200's bandwidth (~4.8 TB/s: ~20 us) and from the 3.6 ms the batch's H2D
// copy takes; the per-pixel work is a handful of shared-memory reads, 12 byte loads and ~40 float operations.

namespace sluice::kernels {
namespace {

constexpr int kThreads = 256;
// Resident blocks per SM asked of the register allocator: the SM's whole thread capacity (full occupancy; on
// sm_90 that is 32 registers a thread, which the kernel fits without spilling).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 750
#define SLUICE_PP_MIN_BLOCKS 4  // 1024 threads per SM
#elif defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || __CUDA_ARCH__ == 890)
#define SLUICE_PP_MIN_BLOCKS 6  // 1536 threads per SM
#else
#define SLUICE_PP_MIN_BLOCKS 8  // 2048 threads per SM (sm_80, sm_90)
#endif
constexpr int kTilePixels = 1024;  // at most this many output pixels per tile
constexpr int kMaxTileRows = 256;  // keeps the row tables small for very narrow outputs

// One tap of an axis: source neighbours as byte offsets (x: within a row, crop and pixel step applied; y: row
// start within the plane) and the weight of the second. o0 < 0 marks a letterbox border position.
struct XTap {
  int o0, o1;
  float w;
};
struct YTap {
  long long o0, o1;
  float w;
};

// One output axis: positions [img_off, img_off + img_len) show the crop [crop_off, crop_off + crop_len)
// resized to img_len; the rest is padding.
struct Axis {
  int img_off, img_len, crop_off, crop_len;
  double inv_den1, inv_den2;  // 1 / (2 * img_len), 1 / (4 * img_len): luma and chroma denominators
};

// Everything the kernel needs, computed once per launch on the host.
struct Plan {
  int batch, out_w, out_h, C;
  ChannelOrder order;
  Layout layout;
  YuvMatrix yuv_matrix;
  bool yuv_full;
  float mean[3], std[3], pad;
  Axis ax, ay;
  int step;                       // bytes per luma/packed pixel: 3 (bgr8, rgb8) or 1
  int cstep;                      // bytes per chroma sample in a row: 2 (nv12) or 1 (i420)
  long long stride, cstride;      // bytes per row of the luma/packed plane and of a chroma plane
  std::size_t in_bytes, luma_bytes, chroma_bytes;
  int tile_w, tile_h, tiles_x;
  int stage_bytes;                // staging area at the start of shared memory (multiple of 16)
  // ROI mode (roi_crop_gpu): item n crops rois[n] of image rois[n].image instead of the plan's crop of image n,
  // for n < *roi_count (all `batch` when null). ax/ay are then derived per item on the device.
  const RoiRect* rois;
  const int* roi_count;
  int images, in_w, in_h;
  bool letterbox;
};

// One output axis' mapping (the crop [crop_off, crop_off + crop_len) resized into [img_off, img_off + img_len)).
__host__ __device__ inline Axis make_axis(int img_off, int img_len, int crop_off, int crop_len) {
  return {img_off, img_len, crop_off, crop_len, 1.0 / (2.0 * img_len), 1.0 / (4.0 * img_len)};
}

// The CPU twin's make_tap (see preprocess_cpu.cpp), reaching the same floor(num/den) without 64-bit division:
// the double product is within 2^-30 of num/den (< 2^17), whose distance to the next integer above is at least
// 1/den (>= 2^-19), so the truncated product is floor(num/den) or, when num/den is an integer, one less; the
// integer fix-up makes it exact either way. The weight is the same correctly rounded float quotient.
__device__ __forceinline__ void make_tap(int o, int in, int out, int k, int plane, double inv_den, int& i0, int& i1,
                                         float& w) {
  const long long num = (2LL * o + 1) * in - static_cast<long long>(k) * out;
  const long long den = 2LL * k * out;
  if (num <= 0) {
    i0 = 0;
    i1 = min(1, plane - 1);
    w = 0.f;
    return;
  }
  long long q = static_cast<long long>(__dmul_rn(static_cast<double>(num), inv_den));
  if (q * den > num) --q;
  if ((q + 1) * den <= num) ++q;
  if (q >= plane - 1) {
    i0 = i1 = plane - 1;
    w = 0.f;
    return;
  }
  i0 = static_cast<int>(q);
  i1 = i0 + 1;
  w = __fdiv_rn(static_cast<float>(num - q * den), static_cast<float>(den));
}

__device__ __forceinline__ float bilinear(const std::uint8_t* __restrict__ r0, const std::uint8_t* __restrict__ r1,
                                          int o0, int o1, float wx, float wy) {
  const float a = __ldg(r0 + o0), b = __ldg(r0 + o1);
  const float c = __ldg(r1 + o0), d = __ldg(r1 + o1);
  const float top = a + wx * (b - a);
  const float bot = c + wx * (d - c);
  return top + wy * (bot - top);
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

template <DType D>
using OutT = std::conditional_t<D == DType::f32, float, std::uint16_t>;

template <DType D>
__device__ __forceinline__ OutT<D> convert(float v) {
  if constexpr (D == DType::f32) {
    return v;
  } else if constexpr (D == DType::f16) {
    return __half_as_ushort(__float2half_rn(v));
  } else {
    return float_to_bf16_bits(v);  // the CPU twin's own rounding, bit for bit
  }
}

// One contiguous destination run of a tile and its staging copy.
struct Run {
  std::size_t dst;  // first element in the output tensor
  int stage;        // first element in the staging area; stage ≡ address of dst (mod 16 bytes)
  int len, head, vecs;
};

// Fills the tap tables of one tile (columns x0.., rows y0..) for the mapping ax/ay. An axis with img_len 0 is
// padding everywhere.
template <bool kYuv>
__device__ void build_taps(const Plan& k, const Axis& ax, const Axis& ay, int x0, int y0, int tw, int th,
                           XTap* xtl, XTap* xtc, YTap* ytl, YTap* ytc) {
  for (int i = static_cast<int>(threadIdx.x); i < tw + th; i += kThreads) {
    const bool is_x = i < tw;
    const Axis& a = is_x ? ax : ay;
    const int o = (is_x ? x0 + i : y0 + i - tw) - a.img_off;
    int l0 = -1, l1 = -1, c0 = -1, c1 = -1;
    float lw = 0.f, cw = 0.f;
    if (o >= 0 && o < a.img_len) {
      make_tap(o, a.crop_len, a.img_len, 1, a.crop_len, a.inv_den1, l0, l1, lw);
      l0 += a.crop_off;
      l1 += a.crop_off;
      if (kYuv) {
        make_tap(o, a.crop_len, a.img_len, 2, a.crop_len / 2, a.inv_den2, c0, c1, cw);
        c0 += a.crop_off / 2;
        c1 += a.crop_off / 2;
      }
    }
    if (is_x) {
      xtl[i] = l0 < 0 ? XTap{-1, -1, 0.f} : XTap{l0 * k.step, l1 * k.step, lw};
      if (kYuv) xtc[i] = c0 < 0 ? XTap{-1, -1, 0.f} : XTap{c0 * k.cstep, c1 * k.cstep, cw};
    } else {
      const int r = i - tw;
      ytl[r] = l0 < 0 ? YTap{-1, -1, 0.f} : YTap{l0 * k.stride, l1 * k.stride, lw};
      if (kYuv) ytc[r] = c0 < 0 ? YTap{-1, -1, 0.f} : YTap{c0 * k.cstride, c1 * k.cstride, cw};
    }
  }
}

template <PixelFormat F, DType D, bool kRoi>
__global__ void __launch_bounds__(kThreads, SLUICE_PP_MIN_BLOCKS) preprocess_kernel(const Plan k, const std::uint8_t* __restrict__ src,
                                                              OutT<D>* __restrict__ dst) {
  using T = OutT<D>;
  constexpr bool kYuv = F == PixelFormat::nv12 || F == PixelFormat::i420;
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte store

  extern __shared__ __align__(16) unsigned char smem[];
  T* stage = reinterpret_cast<T*>(smem);
  YTap* ytl = reinterpret_cast<YTap*>(smem + k.stage_bytes);
  YTap* ytc = ytl + k.tile_h;
  XTap* xtl = reinterpret_cast<XTap*>(ytc + (kYuv ? k.tile_h : 0));
  XTap* xtc = xtl + k.tile_w;

  const int tile = static_cast<int>(blockIdx.x);
  const int ty_idx = tile / k.tiles_x;
  const int x0 = (tile - ty_idx * k.tiles_x) * k.tile_w;
  const int y0 = ty_idx * k.tile_h;
  const int tw = min(k.tile_w, k.out_w - x0);
  const int th = min(k.tile_h, k.out_h - y0);
  const int npx = tw * th;
  const int tid = static_cast<int>(threadIdx.x);

  // Tap tables of this tile's columns and rows: once per block, or per item in ROI mode.
  if constexpr (!kRoi) build_taps<kYuv>(k, k.ax, k.ay, x0, y0, tw, th, xtl, xtc, ytl, ytc);

  // Destination runs: NCHW with 3 channels has one per plane, NHWC and gray a single interleaved one.
  const bool planar = k.layout == Layout::nchw && k.C == 3;
  const int nruns = planar ? 3 : 1;
  const int per_px = planar ? 1 : k.C;  // elements per pixel within a run
  const std::size_t W = static_cast<std::size_t>(k.out_w), H = static_cast<std::size_t>(k.out_h);
  const std::size_t plane = W * H;
  const std::size_t dst_elem = reinterpret_cast<std::uintptr_t>(dst) / sizeof(T);

  // Thread -> first pixel of the tile (row r, column cx); then steps of kThreads pixels, division-free.
  const int r_first = tid / tw, c_first = tid - r_first * tw;
  const int r_step = kThreads / tw, c_step = kThreads - r_step * tw;

  __syncthreads();  // tap tables ready

  int items = k.batch;
  if constexpr (kRoi) {
    if (k.roi_count != nullptr) items = min(items, max(0, *k.roi_count));
  }
  for (int n = static_cast<int>(blockIdx.z); n < items; n += static_cast<int>(gridDim.z)) {
    const std::uint8_t* img = src + static_cast<std::size_t>(n) * k.in_bytes;
    if constexpr (kRoi) {  // this item's rect: its image, and where its crop lands (padding only if unusable)
      const RoiRect roi = k.rois[n];
      Axis ax = make_axis(0, 0, 0, 0), ay = ax;
      if (roi_rect_usable(roi, k.images, k.in_w, k.in_h, kYuv)) {
        const ImagePlacement pl = place_image(roi.width, roi.height, k.out_w, k.out_h, k.letterbox);
        ax = make_axis(pl.x, pl.w, roi.x, roi.width);
        ay = make_axis(pl.y, pl.h, roi.y, roi.height);
        img = src + static_cast<std::size_t>(roi.image) * k.in_bytes;
      }
      build_taps<kYuv>(k, ax, ay, x0, y0, tw, th, xtl, xtc, ytl, ytc);
      __syncthreads();  // this item's tap tables ready (the previous item's last barrier freed them)
    }
    Run run[3] = {};
    int next = 0;
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      if (j < nruns) {
        Run& q = run[j];
        q.dst = planar ? (static_cast<std::size_t>(n) * 3 + j) * plane + static_cast<std::size_t>(y0) * W + x0
                       : ((static_cast<std::size_t>(n) * H + y0) * W + x0) * static_cast<std::size_t>(k.C);
        q.len = npx * per_px;
        const int mis = static_cast<int>((dst_elem + q.dst) & (kVec - 1));
        q.stage = next + mis;
        q.head = min(q.len, (kVec - mis) & (kVec - 1));
        q.vecs = (q.len - q.head) / kVec;
        next = (q.stage + q.len + kVec - 1) / kVec * kVec;
      }
    }

    // Compute every pixel of the tile into the staging area.
    int r = r_first, cx = c_first;
    for (int i = tid; i < npx; i += kThreads) {
      const XTap tx = xtl[cx];
      const YTap ty = ytl[r];
      float v[3];
      if (tx.o0 < 0 || ty.o0 < 0) {
        v[0] = v[1] = v[2] = k.pad;
      } else {
        const std::uint8_t* r0 = img + ty.o0;
        const std::uint8_t* r1 = img + ty.o1;
        if constexpr (F == PixelFormat::gray8) {
          v[0] = v[1] = v[2] = bilinear(r0, r1, tx.o0, tx.o1, tx.w, ty.w);  // gray out uses v[0]
        } else {
          float3 c;  // r, g, b
          if constexpr (F == PixelFormat::bgr8 || F == PixelFormat::rgb8) {
            const float s0 = bilinear(r0, r1, tx.o0, tx.o1, tx.w, ty.w);
            const float s1 = bilinear(r0, r1, tx.o0 + 1, tx.o1 + 1, tx.w, ty.w);
            const float s2 = bilinear(r0, r1, tx.o0 + 2, tx.o1 + 2, tx.w, ty.w);
            c = F == PixelFormat::rgb8 ? make_float3(s0, s1, s2) : make_float3(s2, s1, s0);
          } else {
            const XTap tcx = xtc[cx];
            const YTap tcy = ytc[r];
            const float Y = bilinear(r0, r1, tx.o0, tx.o1, tx.w, ty.w);
            const std::uint8_t* uv = img + k.luma_bytes;
            float U, V;
            if constexpr (F == PixelFormat::nv12) {
              U = bilinear(uv + tcy.o0, uv + tcy.o1, tcx.o0, tcx.o1, tcx.w, tcy.w);
              V = bilinear(uv + tcy.o0, uv + tcy.o1, tcx.o0 + 1, tcx.o1 + 1, tcx.w, tcy.w);
            } else {
              const std::uint8_t* vp = uv + k.chroma_bytes;
              U = bilinear(uv + tcy.o0, uv + tcy.o1, tcx.o0, tcx.o1, tcx.w, tcy.w);
              V = bilinear(vp + tcy.o0, vp + tcy.o1, tcx.o0, tcx.o1, tcx.w, tcy.w);
            }
            c = yuv_to_rgb(Y, U, V, k.yuv_matrix, k.yuv_full);
          }
          if (k.order == ChannelOrder::gray) {
            v[0] = 0.299f * c.x + 0.587f * c.y + 0.114f * c.z;
          } else if (k.order == ChannelOrder::rgb) {
            v[0] = c.x, v[1] = c.y, v[2] = c.z;
          } else {
            v[0] = c.z, v[1] = c.y, v[2] = c.x;
          }
        }
      }
#pragma unroll
      for (int c = 0; c < 3; ++c) {
        if (c < k.C) {
          const float out = __fdiv_rn(v[c] / 255.f - k.mean[c], k.std[c]);
          const int at = planar ? run[c].stage + i : run[0].stage + i * per_px + c;
          stage[at] = convert<D>(out);
        }
      }
      r += r_step;
      cx += c_step;
      if (cx >= tw) {
        cx -= tw;
        ++r;
      }
    }
    __syncthreads();  // staging complete

    // 16-byte stores of every run's aligned middle, then the unaligned ends one element at a time.
    const int v0 = run[0].vecs, v01 = v0 + run[1].vecs, vall = v01 + run[2].vecs;  // unused runs have 0
    for (int j = tid; j < vall; j += kThreads) {
      // Uniform-index selects keep the runs in registers.
      const std::size_t d = j < v0 ? run[0].dst : j < v01 ? run[1].dst : run[2].dst;
      const int st = j < v0 ? run[0].stage : j < v01 ? run[1].stage : run[2].stage;
      const int off = (j < v0 ? run[0].head : j < v01 ? run[1].head : run[2].head) +
                      (j < v0 ? j : j < v01 ? j - v0 : j - v01) * kVec;
      *reinterpret_cast<uint4*>(dst + d + off) = *reinterpret_cast<const uint4*>(stage + st + off);
    }
#pragma unroll
    for (int j = 0; j < 3; ++j) {
      const Run& q = run[j];
      const int tail = q.len - q.head - q.vecs * kVec;
      if (j < nruns && tid < q.head + tail) {
        const int off = tid < q.head ? tid : q.head + q.vecs * kVec + (tid - q.head);
        dst[q.dst + off] = stage[q.stage + off];
      }
    }
    __syncthreads();  // staging free for the next item
  }
}

template <DType D>
int staging_bytes(const Plan& k) {
  constexpr int size = static_cast<int>(sizeof(OutT<D>));
  // Each of up to 3 runs may start up to 2 vectors past its share (alignment shift plus rounding).
  const int elems = k.tile_w * k.tile_h * k.C + 3 * 2 * (16 / size);
  return (elems * size + 15) / 16 * 16;
}

template <PixelFormat F, DType D, bool kRoi>
void launch(Plan k, const std::uint8_t* src, void* dst, cudaStream_t stream) {
  constexpr bool kYuv = F == PixelFormat::nv12 || F == PixelFormat::i420;
  k.stage_bytes = staging_bytes<D>(k);
  const std::size_t smem = static_cast<std::size_t>(k.stage_bytes) +
                           (kYuv ? 2 : 1) * (static_cast<std::size_t>(k.tile_h) * sizeof(YTap) +
                                             static_cast<std::size_t>(k.tile_w) * sizeof(XTap));
  const int tiles_y = (k.out_h + k.tile_h - 1) / k.tile_h;
  // gridDim.z is capped at 65535; the kernel strides over the rest of the batch.
  const dim3 grid(static_cast<unsigned>(k.tiles_x * tiles_y), 1, static_cast<unsigned>(std::min(k.batch, 65535)));
  preprocess_kernel<F, D, kRoi><<<grid, kThreads, smem, stream>>>(k, src, static_cast<OutT<D>*>(dst));
  CUDA_CHECK(cudaPeekAtLastError());
}

template <PixelFormat F, bool kRoi>
void launch_dtype(const Plan& k, DType d, const std::uint8_t* src, void* dst, cudaStream_t stream) {
  switch (d) {
    case DType::f32: launch<F, DType::f32, kRoi>(k, src, dst, stream); break;
    case DType::f16: launch<F, DType::f16, kRoi>(k, src, dst, stream); break;
    case DType::bf16: launch<F, DType::bf16, kRoi>(k, src, dst, stream); break;
    default: throw std::invalid_argument("preprocess: unsupported dtype");  // validate() rejects it first
  }
}

template <bool kRoi>
void launch_format(const Plan& k, PixelFormat f, DType d, const std::uint8_t* src, void* dst, cudaStream_t stream) {
  switch (f) {
    case PixelFormat::bgr8: launch_dtype<PixelFormat::bgr8, kRoi>(k, d, src, dst, stream); break;
    case PixelFormat::rgb8: launch_dtype<PixelFormat::rgb8, kRoi>(k, d, src, dst, stream); break;
    case PixelFormat::gray8: launch_dtype<PixelFormat::gray8, kRoi>(k, d, src, dst, stream); break;
    case PixelFormat::nv12: launch_dtype<PixelFormat::nv12, kRoi>(k, d, src, dst, stream); break;
    case PixelFormat::i420: launch_dtype<PixelFormat::i420, kRoi>(k, d, src, dst, stream); break;
  }
}

// The launchers' shared checks of device pointers and stream.
void check_launch(const char* what, const void* src, const void* dst, DType dtype, cudaStream_t stream) {
  if (src == nullptr || dst == nullptr) throw std::invalid_argument(std::string(what) + ": null src or dst device pointer");
  if (reinterpret_cast<std::uintptr_t>(dst) % dtype_bytes(dtype) != 0)
    throw std::invalid_argument(std::string(what) + ": dst device pointer is not aligned to its element size");
  if (stream == nullptr)
    throw std::invalid_argument(std::string(what) +
                                ": a non-null stream is required (the legacy default stream is not used)");
}

Plan make_plan(const PreprocessParams& p) {
  const PreprocessGeometry g = preprocess_geometry(p);
  Plan k{};
  k.batch = p.batch;
  k.out_w = p.out_width;
  k.out_h = p.out_height;
  k.C = p.out_channels();
  k.order = p.out_order;
  k.layout = p.layout;
  k.yuv_matrix = p.yuv_matrix;
  k.yuv_full = p.yuv_full_range;
  for (int c = 0; c < 3; ++c) {
    k.mean[c] = p.mean[c];
    k.std[c] = p.std[c];
  }
  k.pad = p.pad_value;
  k.ax = make_axis(g.img_x, g.img_w, g.crop_x, g.crop_w);
  k.ay = make_axis(g.img_y, g.img_h, g.crop_y, g.crop_h);
  const bool packed = p.in_format == PixelFormat::bgr8 || p.in_format == PixelFormat::rgb8;
  k.step = packed ? 3 : 1;
  k.stride = static_cast<long long>(p.in_width) * k.step;
  k.cstep = p.in_format == PixelFormat::nv12 ? 2 : 1;
  k.cstride = p.in_format == PixelFormat::nv12 ? p.in_width : p.in_width / 2;
  k.in_bytes = image_bytes(p.in_format, p.in_width, p.in_height);
  k.luma_bytes = static_cast<std::size_t>(p.in_width) * static_cast<std::size_t>(p.in_height);
  k.chroma_bytes = static_cast<std::size_t>(p.in_width / 2) * static_cast<std::size_t>(p.in_height / 2);
  // Whole rows per tile up to kTilePixels wide, else single-row tiles of equal width (the runs of a tile are
  // contiguous in the tensor only in these two cases).
  k.tiles_x = (p.out_width + kTilePixels - 1) / kTilePixels;
  k.tile_w = (p.out_width + k.tiles_x - 1) / k.tiles_x;
  k.tile_h = k.tiles_x > 1 ? 1 : std::max(1, std::min({kTilePixels / p.out_width, p.out_height, kMaxTileRows}));
  return k;
}

}  // namespace

void preprocess_gpu(const PreprocessParams& p, const std::uint8_t* src_device, void* dst_device,
                    cudaStream_t stream) {
  validate(p);
  check_launch("preprocess", src_device, dst_device, p.dtype, stream);
  launch_format<false>(make_plan(p), p.in_format, p.dtype, src_device, dst_device, stream);
}

void roi_crop_gpu(const PreprocessParams& p, const std::uint8_t* images_device, int images,
                  const RoiRect* rois_device, const int* count_device, void* dst_device, cudaStream_t stream) {
  validate_roi_crop(p, images);
  check_launch("roi crop", images_device, dst_device, p.dtype, stream);
  if (rois_device == nullptr) throw std::invalid_argument("roi crop: null rois device pointer");
  Plan k = make_plan(p);
  k.rois = rois_device;
  k.roi_count = count_device;
  k.images = images;
  k.in_w = p.in_width;
  k.in_h = p.in_height;
  k.letterbox = p.letterbox;
  launch_format<true>(k, p.in_format, p.dtype, images_device, dst_device, stream);
}

}  // namespace sluice::kernels
