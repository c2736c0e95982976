#pragma once
// The activations a Conv may carry (its "activation" attribute) and that run as their own nodes: the maths is
// nn/activation_math.hpp's, the parameters' names and defaults the op table's (nn/ops.hpp).
#include <cstddef>

#include "nn/activation_math.hpp"

namespace sluice::nn::cpu {

// The one activation enum and its parameters (nn/activation_math.hpp), under the CPU backend's names.
using ActivationKind = nn::ActivationKind;
using Activation = nn::ActivationParams;

class LayerContext;
// A unary activation node's own op and attributes (LeakyRelu alpha, HardSigmoid alpha/beta, Clip min/max).
Activation unary_activation(const LayerContext& ctx);
// A Conv's fused "activation" with "act_alpha" and "act_beta"; "" is none.
Activation fused_activation(const LayerContext& ctx);

namespace detail {
template <ActivationKind K>
inline float activate(float x, float alpha, float beta) {
  return nn::activate(K, x, alpha, beta);  // K is a constant: the switch folds away
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
