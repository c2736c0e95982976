#pragma once
// The elementwise activations (Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh): one enum and one
// scalar definition, used by constant folding, the CPU backend (nodes and Conv/Linear epilogues) and the CUDA
// kernels. C++17 and free of host-only headers: nvcc compiles it into the .cu files.
//
// The device keeps the formulas its kernels have always used (the fast __expf, fminf/fmaxf, x * (1/6)); the host
// (folding and the CPU backend) keeps its own; each side's numerics are bit-for-bit what they were before the
// three copies became this one. The two sides differ by at most a few ulp (sigmoid) and in NaN handling of
// clip/hard_sigmoid/hard_swish (fminf/fmaxf drop NaN, the host comparisons keep it).
#include <math.h>

#include <cstdint>

#include "kernels/host_device.hpp"

namespace sluice::nn {

// The one activation enum (a Conv/Linear "activation" attribute, a standalone activation node, a CUDA kernel
// parameter). nn/ops.hpp maps each to its op and its ONNX parameter names and defaults.
enum class ActivationKind : std::uint8_t { none, relu, leaky_relu, clip, sigmoid, hard_sigmoid, hard_swish, tanh };

struct ActivationParams {
  ActivationKind kind = ActivationKind::none;
  float alpha = 0.f;  // LeakyRelu slope; HardSigmoid alpha; Clip min
  float beta = 0.f;   // HardSigmoid beta; Clip max
};

namespace activation_detail {
// std::max / std::min exactly (the host formulas were written with them): the first argument wins ties and NaN
// comparisons.
SLUICE_HD float host_max(float a, float b) { return a < b ? b : a; }
SLUICE_HD float host_min(float a, float b) { return b < a ? b : a; }
}  // namespace activation_detail

// act(x) with the kind's parameters (alpha, beta as in ActivationParams).
SLUICE_HD float activate(ActivationKind kind, float x, float alpha, float beta) {
  using activation_detail::host_max;
  using activation_detail::host_min;
  switch (kind) {
    case ActivationKind::none: return x;
    case ActivationKind::relu: return x > 0.f ? x : 0.f;
    case ActivationKind::leaky_relu: return x >= 0.f ? x : alpha * x;
#if defined(__CUDA_ARCH__)
    case ActivationKind::clip: return fminf(fmaxf(x, alpha), beta);
    case ActivationKind::sigmoid: return 1.f / (1.f + __expf(-x));
    case ActivationKind::hard_sigmoid: return fminf(fmaxf(alpha * x + beta, 0.f), 1.f);
    case ActivationKind::hard_swish: return x * fminf(fmaxf(x * (1.f / 6.f) + 0.5f, 0.f), 1.f);
#else
    case ActivationKind::clip: return host_min(host_max(x, alpha), beta);
    case ActivationKind::sigmoid: return 1.f / (1.f + expf(-x));
    case ActivationKind::hard_sigmoid: return host_min(host_max(alpha * x + beta, 0.f), 1.f);
    case ActivationKind::hard_swish: return x * host_min(host_max(x / 6.f + 0.5f, 0.f), 1.f);
#endif
    case ActivationKind::tanh: return tanhf(x);
  }
  return x;
}

SLUICE_HD float activate(const ActivationParams& a, float x) { return activate(a.kind, x, a.alpha, a.beta); }

}  // namespace sluice::nn
