// Data movement: remap_copy (layouts, transposes, concat/split/slice pieces, reshapes, dtype conversion) and pad.
#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

template <typename TOut, typename TIn>
__global__ void remap_kernel(TOut* dst, View dv, const TIn* src, View sv, std::int64_t n) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t d = dv.offset + offset_of(i, dv.rank, dv.shape, dv.stride);
    const std::int64_t s = sv.offset + offset_of(i, sv.rank, sv.shape, sv.stride);
    dst[d] = from_f32<TOut>(to_f32(src[s]));
  }
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
  dispatch_pair(dst_type, src_type, [&](auto o, auto i) {
    using TOut = decltype(o);
    using TIn = decltype(i);
    remap_kernel<TOut, TIn><<<grid_for(n), kBlock, 0, stream>>>(static_cast<TOut*>(dst), dst_view,
                                                                static_cast<const TIn*>(src), src_view, n);
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
