// Data movement: remap_copy (layouts, transposes, concat/split/slice pieces, reshapes, dtype conversion) and pad.
#include <algorithm>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <vector>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// A View's dims for a kernel: 64-bit with plain division, or, when every index and offset fits, 32-bit with the
// extents as FastDiv (a multiply-high instead of a division: the index arithmetic is most of these kernels' work).
template <typename Div, typename I>
struct Dims {
  int rank;
  Div shape[kMaxRank];
  I stride[kMaxRank];
};
using NarrowDims = Dims<FastDiv, std::int32_t>;
using WideDims = Dims<std::int64_t, std::int64_t>;

__device__ __forceinline__ std::int32_t quotient(std::int32_t n, const FastDiv& d) {
  return static_cast<std::int32_t>(d.div(static_cast<std::uint32_t>(n)));
}
__device__ __forceinline__ std::int32_t extent(const FastDiv& d) { return static_cast<std::int32_t>(d.divisor); }
__device__ __forceinline__ std::int64_t quotient(std::int64_t n, std::int64_t d) { return n / d; }
__device__ __forceinline__ std::int64_t extent(std::int64_t d) { return d; }

// The offset of element `linear` (row-major over v.shape, non-negative) in v; dims unrolled so that the
// parameters are read at fixed places.
template <typename Div, typename I>
__device__ __forceinline__ I offset_in(I linear, const Dims<Div, I>& v) {
  I off = 0;
#pragma unroll
  for (int d = kMaxRank - 1; d > 0; --d) {
    if (d >= v.rank) continue;
    const I q = quotient(linear, v.shape[d]);
    off += (linear - q * extent(v.shape[d])) * v.stride[d];
    linear = q;
  }
  return off + linear * v.stride[0];
}

template <typename TOut, typename TIn, typename D, typename I>
__global__ void remap_kernel(TOut* dst, D dv, const TIn* src, D sv, I n) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += step)
    dst[offset_in(i, dv)] = from_f32<TOut>(to_f32(src[offset_in(i, sv)]));
}

// Same-type copies whose innermost dim is contiguous on both sides (a Transpose that keeps the last dim, a Slice
// of whole rows, a Concat piece): 16-byte packs, the views given in packs. Each thread has kPacksInFlight packs
// loaded before it stores them; a side that is one contiguous run (Flat) is addressed by the pack index itself.
constexpr int kPacksInFlight = 4;

template <typename D, typename I, bool DstFlat, bool SrcFlat>
__global__ void remap_pack_kernel(uint4* dst, D dv, const uint4* src, D sv, I packs) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; p < packs; p += kPacksInFlight * step) {
    uint4 v[kPacksInFlight];
#pragma unroll
    for (int u = 0; u < kPacksInFlight; ++u) {
      const I q = p + u * step;
      if (q >= packs) break;
      if constexpr (SrcFlat) v[u] = src[q];
      else v[u] = src[offset_in(q, sv)];
    }
#pragma unroll
    for (int u = 0; u < kPacksInFlight; ++u) {
      const I q = p + u * step;
      if (q >= packs) break;
      if constexpr (DstFlat) dst[q] = v[u];
      else dst[offset_in(q, dv)] = v[u];
    }
  }
}

// Whether both views move in whole 16-byte packs: last dim contiguous and a multiple of the pack on both sides,
// every other stride a multiple of it, both starts aligned.
bool packs_fit(const View& dv, const void* d, const View& sv, const void* s, std::size_t bytes) {
  const std::int64_t per_pack = static_cast<std::int64_t>(16 / bytes);
  for (const View* v : {&dv, &sv}) {
    const int last = v->rank - 1;
    if (v->stride[last] != 1 || v->shape[last] % per_pack != 0) return false;
    for (int d = 0; d < last; ++d)
      if (v->stride[d] % per_pack != 0) return false;
  }
  return reinterpret_cast<std::uintptr_t>(d) % 16 == 0 && reinterpret_cast<std::uintptr_t>(s) % 16 == 0;
}

// The same element order with fewer dims: size-1 dims dropped and each dim merged into the one before it when
// that one steps exactly over it, so a reshape or an unchanged layout becomes one contiguous run.
View collapsed(const View& v) {
  View out;
  out.offset = v.offset;
  for (int d = 0; d < v.rank; ++d) {
    if (v.shape[d] == 1) continue;
    if (out.rank > 0 && out.stride[out.rank - 1] == v.stride[d] * v.shape[d]) {
      out.shape[out.rank - 1] *= v.shape[d];
      out.stride[out.rank - 1] = v.stride[d];
      continue;
    }
    out.shape[out.rank] = v.shape[d];
    out.stride[out.rank] = v.stride[d];
    ++out.rank;
  }
  if (out.rank == 0) {
    out.rank = 1;
    out.shape[0] = 1;
    out.stride[0] = 1;
  }
  return out;
}

// A view that packs_fit, counted in packs of `per_pack` elements from its (aligned) first element.
View in_packs(const View& v, std::int64_t per_pack) {
  View out = v;
  out.offset = 0;
  const int last = v.rank - 1;
  out.shape[last] /= per_pack;
  for (int d = 0; d < last; ++d) out.stride[d] /= per_pack;
  return collapsed(out);
}

bool flat(const View& v) { return v.rank == 1 && v.stride[0] == 1; }

// How far from its first element a view reaches, either way (a Slice with negative steps has negative strides).
std::int64_t reach(const View& v) {
  std::int64_t r = 0;
  for (int d = 0; d < v.rank; ++d) r += (v.shape[d] - 1) * (v.stride[d] < 0 ? -v.stride[d] : v.stride[d]);
  return r;
}

// Whether 32-bit indices (signed: strides may be negative) cover n items and offsets up to `reach`, with headroom
// so that a grid-stride index cannot overflow.
bool narrow_fits(std::int64_t n, std::int64_t reach) {
  return std::max(n, reach + 1) <= std::numeric_limits<std::int32_t>::max() / 2;
}

template <typename D>
D dims_of(const View& v) {
  D out{};
  out.rank = v.rank;
  for (int d = 0; d < v.rank; ++d) {
    if constexpr (std::is_same_v<D, NarrowDims>) {
      out.shape[d] = FastDiv(static_cast<std::uint32_t>(v.shape[d]));
      out.stride[d] = static_cast<std::int32_t>(v.stride[d]);
    } else {
      out.shape[d] = v.shape[d];
      out.stride[d] = v.stride[d];
    }
  }
  return out;
}

template <typename D, typename I, bool DstFlat, bool SrcFlat>
void launch_remap_packs(void* dst, const View& dv, const void* src, const View& sv, std::int64_t packs,
                        cudaStream_t stream) {
  remap_pack_kernel<D, I, DstFlat, SrcFlat><<<grid_for((packs + kPacksInFlight - 1) / kPacksInFlight), kBlock, 0,
                                              stream>>>(static_cast<uint4*>(dst), dims_of<D>(dv),
                                                        static_cast<const uint4*>(src), dims_of<D>(sv),
                                                        static_cast<I>(packs));
}

template <typename D, typename I>
void remap_packs(void* dst, const View& dv, const void* src, const View& sv, std::int64_t packs, cudaStream_t stream) {
  if (flat(dv)) launch_remap_packs<D, I, true, false>(dst, dv, src, sv, packs, stream);
  else if (flat(sv)) launch_remap_packs<D, I, false, true>(dst, dv, src, sv, packs, stream);
  else launch_remap_packs<D, I, false, false>(dst, dv, src, sv, packs, stream);
}

// Pad's dims in the kernel's index type (as Dims): the output's extents, and per dim the elements added before,
// the input's extent and its stride.
template <typename Div, typename I>
struct PadDims {
  int rank;
  Div out_shape[kMaxRank];
  I begin[kMaxRank], in_shape[kMaxRank], in_stride[kMaxRank];
};

// y[i] for each element (or, Packed, each 16-byte pack of a last dim that is not padded) of the output.
template <typename T, typename Div, typename I, bool Packed>
__global__ void pad_kernel(void* y_out, const void* x_in, PadDims<Div, I> p, PadMode mode, float value, I n) {
  using E = std::conditional_t<Packed, uint4, T>;
  E fill;
  if constexpr (Packed) {
    T* f = reinterpret_cast<T*>(&fill);
#pragma unroll
    for (int k = 0; k < static_cast<int>(16 / sizeof(T)); ++k) f[k] = from_f32<T>(value);
  } else {
    fill = from_f32<T>(value);
  }
  E* y = static_cast<E*>(y_out);
  const E* x = static_cast<const E*>(x_in);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += step) {
    I rest = i, src = 0;
    bool inside = true;
#pragma unroll
    for (int d = kMaxRank - 1; d >= 0; --d) {
      if (d >= p.rank) continue;
      const I q = d > 0 ? quotient(rest, p.out_shape[d]) : I{0};
      I c = rest - q * extent(p.out_shape[d]) - p.begin[d];
      rest = q;
      const I len = p.in_shape[d];
      if (c < 0 || c >= len) {
        if (mode == PadMode::constant) {
          inside = false;
          break;
        }
        if (mode == PadMode::edge) {
          c = c < 0 ? 0 : len - 1;
        } else if (len == 1) {
          c = 0;
        } else {  // reflect without repeating the edge, folding as often as needed
          const I period = 2 * (len - 1);
          c = c % period;
          if (c < 0) c += period;
          if (c >= len) c = period - c;
        }
      }
      src += c * p.in_stride[d];
    }
    y[i] = inside ? x[src] : fill;
  }
}

// One dim of a pad: output extent, elements added before, input extent and stride.
struct PadDim {
  std::int64_t out, begin, in, stride;
  bool padded() const { return begin != 0 || out != in; }
};

template <typename T, typename Div, typename I, bool Packed>
void launch_pad(void* y, const void* x, const std::vector<PadDim>& dims, PadMode mode, float value, std::int64_t n,
                cudaStream_t stream) {
  PadDims<Div, I> p{};
  p.rank = static_cast<int>(dims.size());
  for (int d = 0; d < p.rank; ++d) {
    const PadDim& e = dims[static_cast<std::size_t>(d)];
    if constexpr (std::is_same_v<Div, FastDiv>) p.out_shape[d] = FastDiv(static_cast<std::uint32_t>(e.out));
    else p.out_shape[d] = e.out;
    p.begin[d] = static_cast<I>(e.begin);
    p.in_shape[d] = static_cast<I>(e.in);
    p.in_stride[d] = static_cast<I>(e.stride);
  }
  pad_kernel<T, Div, I, Packed><<<grid_for(n), kBlock, 0, stream>>>(y, x, p, mode, value, static_cast<I>(n));
}

template <typename F>
void dispatch_pair(DType out, DType in, F&& f) {
  dispatch_float_type(out, [&](auto o) { dispatch_float_type(in, [&](auto i) { f(o, i); }); });
}

}  // namespace

void remap_copy(DType dst_type, void* dst, const View& dst_view, DType src_type, const void* src,
                const View& src_view, cudaStream_t stream) {
  const std::int64_t n = dst_view.elements();
  if (n != src_view.elements()) throw std::invalid_argument("nn/cuda remap_copy: element counts differ");
  if (dst_view.rank > kMaxRank || src_view.rank > kMaxRank) throw std::invalid_argument("nn/cuda remap_copy: rank");
  if (n == 0) return;
  const View dv = collapsed(dst_view), sv = collapsed(src_view);
  const std::size_t bytes = dtype_bytes(dst_type);
  if (dst_type == src_type && dv.rank == 1 && sv.rank == 1 && dv.stride[0] == 1 && sv.stride[0] == 1) {
    CUDA_CHECK(cudaMemcpyAsync(static_cast<std::byte*>(dst) + dv.offset * bytes,
                               static_cast<const std::byte*>(src) + sv.offset * dtype_bytes(src_type),
                               static_cast<std::size_t>(n) * bytes, cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const bool narrow = narrow_fits(n, std::max(reach(dv), reach(sv)));
  if (dst_type == src_type) {
    void* d = static_cast<std::byte*>(dst) + dv.offset * static_cast<std::int64_t>(bytes);
    const void* s = static_cast<const std::byte*>(src) + sv.offset * static_cast<std::int64_t>(bytes);
    if (packs_fit(dv, d, sv, s, bytes)) {
      const std::int64_t per_pack = static_cast<std::int64_t>(16 / bytes), packs = n / per_pack;
      const View dp = in_packs(dv, per_pack), sp = in_packs(sv, per_pack);
      if (narrow) remap_packs<NarrowDims, std::int32_t>(d, dp, s, sp, packs, stream);
      else remap_packs<WideDims, std::int64_t>(d, dp, s, sp, packs, stream);
      check_launch();
      return;
    }
  }
  dispatch_pair(dst_type, src_type, [&](auto o, auto i) {
    using TOut = decltype(o);
    using TIn = decltype(i);
    auto* d = static_cast<TOut*>(dst) + dv.offset;
    const auto* s = static_cast<const TIn*>(src) + sv.offset;
    if (narrow)
      remap_kernel<TOut, TIn, NarrowDims, std::int32_t><<<grid_for(n), kBlock, 0, stream>>>(
          d, dims_of<NarrowDims>(dv), s, dims_of<NarrowDims>(sv), static_cast<std::int32_t>(n));
    else
      remap_kernel<TOut, TIn, WideDims, std::int64_t><<<grid_for(n), kBlock, 0, stream>>>(
          d, dims_of<WideDims>(dv), s, dims_of<WideDims>(sv), n);
  });
  check_launch();
}

void pad(DType type, void* y, int rank, const std::int64_t* out_shape, const void* x, const std::int64_t* in_shape,
         const std::int64_t* in_stride, const std::int64_t* begin, PadMode mode, float value, cudaStream_t stream) {
  if (rank > kMaxRank) throw std::invalid_argument("nn/cuda pad: rank above 6");
  std::int64_t n = 1, in_reach = 0;
  for (int d = 0; d < rank; ++d) {
    n *= out_shape[d];
    in_reach += (in_shape[d] - 1) * (in_stride[d] < 0 ? -in_stride[d] : in_stride[d]);
  }
  if (n == 0) return;
  // Dims that are not padded: size 1 dropped, neighbours the input steps over as one merged (y is contiguous), so
  // that each element divides less.
  std::vector<PadDim> dims;
  for (int d = 0; d < rank; ++d) {
    const PadDim e{out_shape[d], begin[d], in_shape[d], in_stride[d]};
    if (!e.padded() && e.in == 1) continue;
    if (!e.padded() && !dims.empty() && !dims.back().padded() && dims.back().stride == e.stride * e.in) {
      dims.back() = {dims.back().out * e.out, 0, dims.back().in * e.in, e.stride};
      continue;
    }
    dims.push_back(e);
  }
  if (dims.empty()) dims.push_back({1, 0, 1, 1});
  // A last dim that is not padded, contiguous and of whole 16-byte packs, with every other stride a multiple of
  // the pack and both tensors aligned: moved in packs (padding elsewhere, in any mode, fills or folds whole packs).
  const std::int64_t per_pack = static_cast<std::int64_t>(16 / dtype_bytes(type));
  PadDim& last = dims.back();
  bool packed = !last.padded() && last.stride == 1 && last.in % per_pack == 0 &&
                reinterpret_cast<std::uintptr_t>(x) % 16 == 0 && reinterpret_cast<std::uintptr_t>(y) % 16 == 0;
  for (std::size_t d = 0; packed && d + 1 < dims.size(); ++d) packed = dims[d].stride % per_pack == 0;
  if (packed) {
    last.in /= per_pack;
    last.out /= per_pack;
    for (std::size_t d = 0; d + 1 < dims.size(); ++d) dims[d].stride /= per_pack;
    n /= per_pack;
  }
  const bool narrow = narrow_fits(n * (packed ? per_pack : 1), in_reach);
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    if (packed) {
      if (narrow) launch_pad<T, FastDiv, std::int32_t, true>(y, x, dims, mode, value, n, stream);
      else launch_pad<T, std::int64_t, std::int64_t, true>(y, x, dims, mode, value, n, stream);
    } else {
      if (narrow) launch_pad<T, FastDiv, std::int32_t, false>(y, x, dims, mode, value, n, stream);
      else launch_pad<T, std::int64_t, std::int64_t, false>(y, x, dims, mode, value, n, stream);
    }
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
