#pragma once
// The activations a Conv may carry (its "activation" attribute) and that run as their own nodes.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

namespace sluice::nn::cpu {

enum class ActivationKind { none, relu, leaky_relu, clip, sigmoid, hard_sigmoid, hard_swish, tanh };

struct Activation {
  ActivationKind kind = ActivationKind::none;
  float alpha = 0.0f;  // LeakyRelu slope; HardSigmoid alpha; Clip min
  float beta = 0.0f;   // HardSigmoid beta; Clip max
};

class LayerContext;
// A unary activation node's own op and attributes (LeakyRelu alpha, HardSigmoid alpha/beta, Clip min/max).
Activation unary_activation(const LayerContext& ctx);
// A Conv's fused "activation" with "act_alpha" and "act_beta"; "" is none.
Activation fused_activation(const LayerContext& ctx);

namespace detail {
template <ActivationKind K>
inline float activate(float x, float alpha, float beta) {
  if constexpr (K == ActivationKind::none) return x;
  if constexpr (K == ActivationKind::relu) return x > 0.0f ? x : 0.0f;
  if constexpr (K == ActivationKind::leaky_relu) return x >= 0.0f ? x : alpha * x;
  if constexpr (K == ActivationKind::clip) return std::min(std::max(x, alpha), beta);
  if constexpr (K == ActivationKind::sigmoid) return 1.0f / (1.0f + std::exp(-x));
  if constexpr (K == ActivationKind::hard_sigmoid) return std::min(std::max(alpha * x + beta, 0.0f), 1.0f);
  if constexpr (K == ActivationKind::hard_swish) return x * std::min(std::max(x / 6.0f + 0.5f, 0.0f), 1.0f);
  if constexpr (K == ActivationKind::tanh) return std::tanh(x);
}

// dst[i] = act(src[i] + bias + (residual ? residual[i] : 0)); dst may equal src.
template <ActivationKind K>
inline void apply_row(const float* src, float bias, const float* residual, float* dst, std::size_t n, float alpha,
                      float beta) {
  if (residual) {
    for (std::size_t i = 0; i < n; ++i) dst[i] = activate<K>(src[i] + bias + residual[i], alpha, beta);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = activate<K>(src[i] + bias, alpha, beta);
  }
}
}  // namespace detail

// The epilogue of every layer that ends in an activation: one pass, the kind dispatched once per row.
inline void apply_activation(const Activation& a, const float* src, float bias, const float* residual, float* dst,
                             std::size_t n) {
  using K = ActivationKind;
  switch (a.kind) {
    case K::none: return detail::apply_row<K::none>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::relu: return detail::apply_row<K::relu>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::leaky_relu: return detail::apply_row<K::leaky_relu>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::clip: return detail::apply_row<K::clip>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::sigmoid: return detail::apply_row<K::sigmoid>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::hard_sigmoid: return detail::apply_row<K::hard_sigmoid>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::hard_swish: return detail::apply_row<K::hard_swish>(src, bias, residual, dst, n, a.alpha, a.beta);
    case K::tanh: return detail::apply_row<K::tanh>(src, bias, residual, dst, n, a.alpha, a.beta);
  }
}

}  // namespace sluice::nn::cpu
