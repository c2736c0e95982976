// BatchNormalization right after a Conv becomes part of the Conv's weights and bias:
//   s = scale / sqrt(var + epsilon);  W'[o] = W[o] * s[o];  B'[o] = (B[o] - mean[o]) * s[o] + bias[o].
// Only when the Conv's output feeds nothing else (and is no graph output); the Conv takes the BN's output name.
#include <cmath>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

void fold_into(Graph& g, Node& conv, const Node& bn) {
  const Tensor& w = g.constants.at(conv.inputs[1]);
  const auto& scale = g.constants.at(bn.inputs[1]).f32;
  const auto& shift = g.constants.at(bn.inputs[2]).f32;
  const auto& mean = g.constants.at(bn.inputs[3]).f32;
  const auto& var = g.constants.at(bn.inputs[4]).f32;
  const float epsilon = bn.attrs.f("epsilon", 1e-5f);
  const auto outputs = static_cast<std::size_t>(w.shape[0]);
  const std::size_t per_output = w.f32.size() / outputs;

  Tensor folded_w = w, folded_b;
  folded_b.shape = {w.shape[0]};
  folded_b.f32.assign(outputs, 0.f);
  if (!conv.inputs[2].empty()) folded_b.f32 = g.constants.at(conv.inputs[2]).f32;
  for (std::size_t o = 0; o < outputs; ++o) {
    const double s = static_cast<double>(scale[o]) / std::sqrt(static_cast<double>(var[o]) + epsilon);
    for (std::size_t i = 0; i < per_output; ++i)
      folded_w.f32[o * per_output + i] = static_cast<float>(w.f32[o * per_output + i] * s);
    folded_b.f32[o] = static_cast<float>((static_cast<double>(folded_b.f32[o]) - mean[o]) * s + shift[o]);
  }
  // New names: the original weights may be shared with another node.
  const std::string w_name = unused_value_name(g, conv.name + ".weight_bn_folded");
  const std::string b_name = unused_value_name(g, conv.name + ".bias_bn_folded");
  g.constants[w_name] = std::move(folded_w);
  g.constants[b_name] = std::move(folded_b);
  conv.inputs[1] = w_name;
  conv.inputs[2] = b_name;
  g.shapes.erase(conv.outputs[0]);
  conv.outputs[0] = bn.outputs[0];
}

}  // namespace

void fold_batchnorm(Graph& g) {
  const auto consumers = consumer_counts(g);
  std::map<std::string, std::size_t> producer;
  std::vector<bool> folded(g.nodes.size(), false);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& bn = g.nodes[i];
    if (bn.op == Op::BatchNormalization) {
      auto p = producer.find(bn.inputs[0]);
      if (p != producer.end() && g.nodes[p->second].op == Op::Conv && has_single_use(g, consumers, bn.inputs[0])) {
        Node& conv = g.nodes[p->second];
        if (conv.attrs.s("activation", "").empty() && conv.inputs[3].empty()) {
          fold_into(g, conv, bn);
          producer[bn.outputs[0]] = p->second;
          folded[i] = true;
          g.rewrites.push_back("folded " + bn.where() + " into " + conv.where());
          continue;
        }
      }
    }
    for (const auto& out : g.nodes[i].outputs) producer[out] = i;
  }
  std::vector<Node> kept;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    if (!folded[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

}  // namespace sluice::nn::passes
