// Data movement: remap_copy (layouts, transposes, concat/split/slice pieces, reshapes, dtype conversion) and pad.
#include <algorithm>
#include <cstddef>
#include <limits>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// A View's dims in the index type of the kernel (32-bit division is several times cheaper than 64-bit).
template <typename I>
struct Dims {
  int rank;
  I shape[kMaxRank], stride[kMaxRank];
};

template <typename I>
__device__ __forceinline__ I offset_in(I linear, const Dims<I>& v) {
  I off = 0;
  for (int d = v.rank - 1; d > 0; --d) {
    const I q = linear / v.shape[d];
    off += (linear - q * v.shape[d]) * v.stride[d];
    linear = q;
  }
  return off + linear * v.stride[0];
}

template <typename TOut, typename TIn, typename I>
__global__ void remap_kernel(TOut* dst, Dims<I> dv, const TIn* src, Dims<I> sv, I n) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += step)
    dst[offset_in(i, dv)] = from_f32<TOut>(to_f32(src[offset_in(i, sv)]));
}

// Same-type copies whose innermost dim is contiguous on both sides (a Transpose that keeps the last dim, a Slice
// of whole rows, a Concat piece): 16-byte packs, one index decomposition per pack.
template <typename T>
struct alignas(16) Pack16 {
  T v[16 / sizeof(T)];
};

template <typename T, typename I>
__global__ void remap_pack_kernel(T* dst, Dims<I> dv, const T* src, Dims<I> sv, I packs) {
  constexpr I V = 16 / sizeof(T);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; p < packs; p += step)
    *reinterpret_cast<Pack16<T>*>(dst + offset_in(p * V, dv)) =
        *reinterpret_cast<const Pack16<T>*>(src + offset_in(p * V, sv));
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

// How far from its first element a view reaches, either way (a Slice with negative steps has negative strides).
std::int64_t reach(const View& v) {
  std::int64_t r = 0;
  for (int d = 0; d < v.rank; ++d) r += (v.shape[d] - 1) * (v.stride[d] < 0 ? -v.stride[d] : v.stride[d]);
  return r;
}

template <typename I>
Dims<I> dims_of(const View& v) {
  Dims<I> out{v.rank, {}, {}};
  for (int d = 0; d < v.rank; ++d) {
    out.shape[d] = static_cast<I>(v.shape[d]);
    out.stride[d] = static_cast<I>(v.stride[d]);
  }
  return out;
}

struct PadShape {
  int rank;
  std::int64_t out_shape[kMaxRank], begin[kMaxRank], in_shape[kMaxRank], in_stride[kMaxRank];
};

template <typename T>
__global__ void pad_kernel(T* y, const T* x, PadShape p, PadMode mode, float value, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    std::int64_t rest = i, src = 0;
    bool inside = true;
    for (int d = p.rank - 1; d >= 0; --d) {
      const std::int64_t q = rest / p.out_shape[d];
      std::int64_t c = rest - q * p.out_shape[d] - p.begin[d];
      rest = q;
      const std::int64_t len = p.in_shape[d];
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
          const std::int64_t period = 2 * (len - 1);
          c = c % period;
          if (c < 0) c += period;
          if (c >= len) c = period - c;
        }
      }
      src += c * p.in_stride[d];
    }
    y[i] = inside ? x[src] : from_f32<T>(value);
  }
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
  // Signed (strides may be negative), with headroom so the grid-stride index cannot overflow.
  const bool narrow = std::max({n, reach(dv) + 1, reach(sv) + 1}) <= std::numeric_limits<std::int32_t>::max() / 2;
  if (dst_type == src_type) {
    void* d = static_cast<std::byte*>(dst) + dv.offset * static_cast<std::int64_t>(bytes);
    const void* s = static_cast<const std::byte*>(src) + sv.offset * static_cast<std::int64_t>(bytes);
    if (packs_fit(dv, d, sv, s, bytes)) {
      const std::int64_t packs = n / static_cast<std::int64_t>(16 / bytes);
      dispatch_float_type(dst_type, [&](auto tag) {
        using T = decltype(tag);
        if (narrow)
          remap_pack_kernel<T, std::int32_t><<<grid_for(packs), kBlock, 0, stream>>>(
              static_cast<T*>(d), dims_of<std::int32_t>(dv), static_cast<const T*>(s), dims_of<std::int32_t>(sv),
              static_cast<std::int32_t>(packs));
        else
          remap_pack_kernel<T, std::int64_t><<<grid_for(packs), kBlock, 0, stream>>>(
              static_cast<T*>(d), dims_of<std::int64_t>(dv), static_cast<const T*>(s), dims_of<std::int64_t>(sv),
              packs);
      });
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
      remap_kernel<TOut, TIn, std::int32_t><<<grid_for(n), kBlock, 0, stream>>>(
          d, dims_of<std::int32_t>(dv), s, dims_of<std::int32_t>(sv), static_cast<std::int32_t>(n));
    else
      remap_kernel<TOut, TIn, std::int64_t><<<grid_for(n), kBlock, 0, stream>>>(
          d, dims_of<std::int64_t>(dv), s, dims_of<std::int64_t>(sv), n);
  });
  check_launch();
}

void pad(DType type, void* y, int rank, const std::int64_t* out_shape, const void* x, const std::int64_t* in_shape,
         const std::int64_t* in_stride, const std::int64_t* begin, PadMode mode, float value, cudaStream_t stream) {
  if (rank > kMaxRank) throw std::invalid_argument("nn/cuda pad: rank above 6");
  PadShape p{};
  p.rank = rank;
  std::int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    p.out_shape[d] = out_shape[d];
    p.begin[d] = begin[d];
    p.in_shape[d] = in_shape[d];
    p.in_stride[d] = in_stride[d];
    n *= out_shape[d];
  }
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    pad_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), p, mode, value, n);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
