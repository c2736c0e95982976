// Elementwise kernels: activations, the math ops, the convolution epilogue, broadcasting binary ops, per-channel
// affine.
// All are memory bound; contiguous cases move 16 bytes per thread and access when sizes and pointers allow.
#include <algorithm>
#include <limits>

#include "nn/cuda/kernel_util.cuh"

namespace sluice::nn::cuda {
namespace {

// Elements per 16-byte access.
template <typename T>
constexpr int kVec = 16 / sizeof(T);

template <typename T>
struct alignas(16) Pack {
  T v[kVec<T>];
};

bool aligned16(const void* p) { return p == nullptr || reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <typename T, bool Vectorised>
__global__ void epilogue_kernel(T* y, const T* bias, const T* residual, std::int64_t n, std::int64_t channels,
                                ActivationParams act) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  if constexpr (Vectorised) {
    constexpr int V = kVec<T>;
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < n / V; p += step) {
      Pack<T> out = reinterpret_cast<const Pack<T>*>(y)[p];
      Pack<T> res{};
      if (residual) res = reinterpret_cast<const Pack<T>*>(residual)[p];
      const std::int64_t c0 = (p * V) % channels;  // channels % V == 0: one pack never wraps
#pragma unroll
      for (int k = 0; k < V; ++k) {
        float v = to_f32(out.v[k]);
        if (bias) v += to_f32(bias[c0 + k]);
        if (residual) v += to_f32(res.v[k]);
        out.v[k] = from_f32<T>(apply_activation(act, v));
      }
      reinterpret_cast<Pack<T>*>(y)[p] = out;
    }
  } else {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
      float v = to_f32(y[i]);
      if (bias) v += to_f32(bias[i % channels]);
      if (residual) v += to_f32(residual[i]);
      y[i] = from_f32<T>(apply_activation(act, v));
    }
  }
}

// The elementwise maps y[i] = fn(x[i]): an activation or a math op.
struct ActivationFn {
  ActivationParams act;
  __device__ float operator()(float x) const { return apply_activation(act, x); }
};
struct UnaryMathFn {
  UnaryMath op;
  __device__ float operator()(float x) const { return apply_unary_math(op, x); }
};
// The op fixed at compile time: the kernel then holds only its formula, not a switch per element (Gelu's erf is
// the costly case: ViT-B/16 and Swin-T run it on their widest tensors).
template <UnaryMath Op>
struct FixedUnaryMathFn {
  __device__ float operator()(float x) const { return apply_unary_math(Op, x); }
};

template <typename T, bool Vectorised, typename Fn>
__global__ void map_kernel(T* y, const T* x, std::int64_t n, Fn fn) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  if constexpr (Vectorised) {
    constexpr int V = kVec<T>;
    for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < n / V; p += step) {
      Pack<T> v = reinterpret_cast<const Pack<T>*>(x)[p];
#pragma unroll
      for (int k = 0; k < V; ++k) v.v[k] = from_f32<T>(fn(to_f32(v.v[k])));
      reinterpret_cast<Pack<T>*>(y)[p] = v;
    }
  } else {
    for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step)
      y[i] = from_f32<T>(fn(to_f32(x[i])));
  }
}

template <typename Fn>
void launch_map(DType type, void* y, const void* x, std::int64_t n, Fn fn, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    if (n % kVec<T> == 0 && aligned16(x) && aligned16(y))
      map_kernel<T, true><<<grid_for(n / kVec<T>), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x),
                                                                        n, fn);
    else
      map_kernel<T, false><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), n, fn);
  });
  check_launch();
}

// I: the index type, 32-bit whenever the tensors allow (its division is several times cheaper than 64-bit).
template <typename I>
struct BinaryShape {
  int rank;
  I shape[kMaxRank], a_stride[kMaxRank], b_stride[kMaxRank];
};

template <typename T, typename I>
__global__ void binary_kernel(BinaryMath op, T* y, const T* a, const T* b, BinaryShape<I> s, I n) {
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; i < n; i += step) {
    I rest = i, ao = 0, bo = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const I q = rest / s.shape[d];
      const I coord = rest - q * s.shape[d];
      ao += coord * s.a_stride[d];
      bo += coord * s.b_stride[d];
      rest = q;
    }
    y[i] = from_f32<T>(apply_binary_math(op, to_f32(a[ao]), to_f32(b[bo])));
  }
}

// Packs of V elements along y's innermost dim, over which each operand is contiguous (stride 1) or broadcast
// (stride 0): a bias over the last dim, a scalar, a residual. One index decomposition per pack, not per element.
template <typename T, typename I>
__global__ void binary_pack_kernel(BinaryMath op, T* y, const T* a, const T* b, BinaryShape<I> s, I packs) {
  constexpr int V = kVec<T>;
  const int last = s.rank - 1;
  const I packs_per_row = s.shape[last] / V;
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I p = blockIdx.x * static_cast<I>(blockDim.x) + threadIdx.x; p < packs; p += step) {
    I rest = p / packs_per_row;
    const I inner = (p - rest * packs_per_row) * V;
    I ao = inner * s.a_stride[last], bo = inner * s.b_stride[last];
    for (int d = last - 1; d >= 0; --d) {
      const I q = rest / s.shape[d];
      const I coord = rest - q * s.shape[d];
      ao += coord * s.a_stride[d];
      bo += coord * s.b_stride[d];
      rest = q;
    }
    Pack<T> va, vb, out;
    if (s.a_stride[last] == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) va.v[k] = a[ao];
    } else {
      va = *reinterpret_cast<const Pack<T>*>(a + ao);
    }
    if (s.b_stride[last] == 0) {
#pragma unroll
      for (int k = 0; k < V; ++k) vb.v[k] = b[bo];
    } else {
      vb = *reinterpret_cast<const Pack<T>*>(b + bo);
    }
#pragma unroll
    for (int k = 0; k < V; ++k) out.v[k] = from_f32<T>(apply_binary_math(op, to_f32(va.v[k]), to_f32(vb.v[k])));
    reinterpret_cast<Pack<T>*>(y)[p] = out;
  }
}

// Both operands contiguous with y's shape (the residual-add case): 16-byte packs.
template <typename T>
__global__ void binary_same_kernel(BinaryMath op, T* y, const T* a, const T* b, std::int64_t packs) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t p = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; p < packs; p += step) {
    const Pack<T> va = reinterpret_cast<const Pack<T>*>(a)[p];
    const Pack<T> vb = reinterpret_cast<const Pack<T>*>(b)[p];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < kVec<T>; ++k) out.v[k] = from_f32<T>(apply_binary_math(op, to_f32(va.v[k]), to_f32(vb.v[k])));
    reinterpret_cast<Pack<T>*>(y)[p] = out;
  }
}

template <typename T>
__global__ void channel_affine_kernel(T* y, const T* x, const float* scale, const float* shift, std::int64_t n,
                                      std::int64_t channels, std::int64_t inner) {
  const std::int64_t step = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n; i += step) {
    const std::int64_t c = (i / inner) % channels;
    y[i] = from_f32<T>(to_f32(x[i]) * scale[c] + shift[c]);
  }
}

}  // namespace

void activation(DType type, void* y, const void* x, std::int64_t n, ActivationParams act, cudaStream_t stream) {
  launch_map(type, y, x, n, ActivationFn{act}, stream);
}

void unary_math(DType type, void* y, const void* x, std::int64_t n, UnaryMath op, cudaStream_t stream) {
  switch (op) {
    case UnaryMath::gelu: return launch_map(type, y, x, n, FixedUnaryMathFn<UnaryMath::gelu>{}, stream);
    case UnaryMath::erf: return launch_map(type, y, x, n, FixedUnaryMathFn<UnaryMath::erf>{}, stream);
    default: return launch_map(type, y, x, n, UnaryMathFn{op}, stream);
  }
}

void bias_residual_activation(DType type, void* y, const void* bias, const void* residual, std::int64_t n,
                              std::int64_t channels, ActivationParams act, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    auto* out = static_cast<T*>(y);
    const auto* b = static_cast<const T*>(bias);
    const auto* r = static_cast<const T*>(residual);
    if (channels % kVec<T> == 0 && aligned16(y) && aligned16(residual))
      epilogue_kernel<T, true><<<grid_for(n / kVec<T>), kBlock, 0, stream>>>(out, b, r, n, channels, act);
    else
      epilogue_kernel<T, false><<<grid_for(n), kBlock, 0, stream>>>(out, b, r, n, channels, act);
  });
  check_launch();
}

void binary(DType type, BinaryMath op, void* y, int rank, const std::int64_t* out_shape, const void* a,
            const std::int64_t* a_stride, const void* b, const std::int64_t* b_stride, cudaStream_t stream) {
  if (rank > kMaxRank) throw std::invalid_argument("nn/cuda binary: rank above 6");
  // Size-1 dims dropped and neighbours merged where y (contiguous), a and b all step over them evenly: a bias
  // add over [N, T, C] becomes [N*T, C], a scalar operand one dim of stride 0.
  BinaryShape<std::int64_t> s{};
  for (int d = 0; d < rank; ++d) {
    if (out_shape[d] == 1) continue;
    const int prev = s.rank - 1;
    if (prev >= 0 && s.a_stride[prev] == a_stride[d] * out_shape[d] && s.b_stride[prev] == b_stride[d] * out_shape[d]) {
      s.shape[prev] *= out_shape[d];
      s.a_stride[prev] = a_stride[d];
      s.b_stride[prev] = b_stride[d];
      continue;
    }
    s.shape[s.rank] = out_shape[d];
    s.a_stride[s.rank] = a_stride[d];
    s.b_stride[s.rank] = b_stride[d];
    ++s.rank;
  }
  if (s.rank == 0) {
    s.rank = 1;
    s.shape[0] = 1;
  }
  std::int64_t n = 1, a_reach = 0, b_reach = 0;
  bool same = true;  // a and b both contiguous in y's order
  for (int d = s.rank - 1; d >= 0; --d) {
    if (s.a_stride[d] != n || s.b_stride[d] != n) same = false;
    n *= s.shape[d];
    a_reach += (s.shape[d] - 1) * s.a_stride[d];
    b_reach += (s.shape[d] - 1) * s.b_stride[d];
  }
  if (n == 0) return;
  const bool narrow = std::max({n, a_reach + 1, b_reach + 1}) <= std::numeric_limits<std::int32_t>::max() / 2;
  BinaryShape<std::int32_t> s32{s.rank, {}, {}, {}};
  for (int d = 0; d < s.rank; ++d) {
    s32.shape[d] = static_cast<std::int32_t>(s.shape[d]);
    s32.a_stride[d] = static_cast<std::int32_t>(s.a_stride[d]);
    s32.b_stride[d] = static_cast<std::int32_t>(s.b_stride[d]);
  }
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = kVec<T>;
    // Packs along the last dim: each operand contiguous or broadcast there, every pack 16-byte aligned.
    const int last = s.rank - 1;
    bool packs = s.shape[last] % V == 0 && aligned16(a) && aligned16(b) && aligned16(y);
    for (const std::int64_t* st : {s.a_stride, s.b_stride}) {
      if (st[last] != 0 && st[last] != 1) packs = false;
      for (int d = 0; d < last; ++d)
        if (st[last] == 1 && st[d] % V != 0) packs = false;
    }
    if (same && n % V == 0 && aligned16(a) && aligned16(b) && aligned16(y))
      binary_same_kernel<T><<<grid_for(n / V), kBlock, 0, stream>>>(
          op, static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), n / V);
    else if (packs && narrow)
      binary_pack_kernel<T, std::int32_t><<<grid_for(n / V), kBlock, 0, stream>>>(
          op, static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), s32,
          static_cast<std::int32_t>(n / V));
    else if (packs)
      binary_pack_kernel<T, std::int64_t><<<grid_for(n / V), kBlock, 0, stream>>>(
          op, static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), s, n / V);
    else if (narrow)
      binary_kernel<T, std::int32_t><<<grid_for(n), kBlock, 0, stream>>>(
          op, static_cast<T*>(y), static_cast<const T*>(a), static_cast<const T*>(b), s32, static_cast<std::int32_t>(n));
    else
      binary_kernel<T, std::int64_t><<<grid_for(n), kBlock, 0, stream>>>(op, static_cast<T*>(y), static_cast<const T*>(a),
                                                                         static_cast<const T*>(b), s, n);
  });
  check_launch();
}

void channel_affine(DType type, void* y, const void* x, const float* scale, const float* shift, std::int64_t n,
                    std::int64_t channels, std::int64_t inner, cudaStream_t stream) {
  if (n == 0) return;
  dispatch_float_type(type, [&](auto tag) {
    using T = decltype(tag);
    channel_affine_kernel<T><<<grid_for(n), kBlock, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(x), scale,
                                                                 shift, n, channels, inner);
  });
  check_launch();
}

}  // namespace sluice::nn::cuda
