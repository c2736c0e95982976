#include "nn/cpu/activation.hpp"

#include <map>

#include "nn/cpu/layer.hpp"

namespace sluice::nn::cpu {

namespace {

struct ActivationSpec {
  ActivationKind kind;
  float default_alpha, default_beta;  // the ONNX defaults of the op's two parameters, when it has them
};

const ActivationSpec* find_spec(const std::string& op) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  static const std::map<std::string, ActivationSpec> specs = {
      {"Relu", {ActivationKind::relu, 0.0f, 0.0f}},
      {"LeakyRelu", {ActivationKind::leaky_relu, 0.01f, 0.0f}},
      {"Clip", {ActivationKind::clip, -inf, inf}},
      {"Sigmoid", {ActivationKind::sigmoid, 0.0f, 0.0f}},
      {"HardSigmoid", {ActivationKind::hard_sigmoid, 0.2f, 0.5f}},
      {"HardSwish", {ActivationKind::hard_swish, 0.0f, 0.0f}},
      {"Tanh", {ActivationKind::tanh, 0.0f, 0.0f}},
  };
  auto it = specs.find(op);
  return it == specs.end() ? nullptr : &it->second;
}

// The attribute names of the op's parameters as a node of its own spells them.
std::pair<const char*, const char*> own_parameter_names(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::leaky_relu: return {"alpha", nullptr};
    case ActivationKind::hard_sigmoid: return {"alpha", "beta"};
    case ActivationKind::clip: return {"min", "max"};
    default: return {nullptr, nullptr};
  }
}

}  // namespace

Activation unary_activation(const LayerContext& ctx) {
  const ActivationSpec* spec = find_spec(ctx.node().op);
  if (!spec) ctx.fail("is not an activation");
  const auto [alpha_name, beta_name] = own_parameter_names(spec->kind);
  Activation a{spec->kind, spec->default_alpha, spec->default_beta};
  if (alpha_name) a.alpha = ctx.attrs().f(alpha_name, a.alpha);
  if (beta_name) a.beta = ctx.attrs().f(beta_name, a.beta);
  return a;
}

Activation fused_activation(const LayerContext& ctx) {
  const std::string op = ctx.attrs().s("activation", "");
  if (op.empty()) return {};
  const ActivationSpec* spec = find_spec(op);
  if (!spec)
    ctx.fail("fused activation '" + op + "' is not one of Relu, LeakyRelu, Clip, Sigmoid, HardSigmoid, HardSwish, Tanh");
  return {spec->kind, ctx.attrs().f("act_alpha", spec->default_alpha), ctx.attrs().f("act_beta", spec->default_beta)};
}

}  // namespace sluice::nn::cpu
