#include "nn/cpu/activation.hpp"

#include "nn/cpu/layer.hpp"

namespace sluice::nn::cpu {

Activation unary_activation(const LayerContext& ctx) {
  if (!is_activation(ctx.node().op)) ctx.fail("is not an activation");
  return activation_params(ctx.node().op, ctx.attrs());
}

Activation fused_activation(const LayerContext& ctx) {
  const auto act = fused_activation_params(ctx.attrs());
  if (!act)
    ctx.fail("fused activation '" + ctx.attrs().s("activation", "") +
             "' is not one of Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh");
  return *act;
}

}  // namespace sluice::nn::cpu
