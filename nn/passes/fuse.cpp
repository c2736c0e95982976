// Conv fusions, so that Y = activation(conv(X, W) + B + R) runs as one node:
//   Conv -> Add(per-channel constant)   the constant joins the bias B
//   Conv -> Add(value of the same shape) the value becomes the residual input R (ResNet's identity branch)
//   Conv -> activation                   the activation becomes the Conv's "activation" attribute
// Each needs the Conv's output to feed only the node it swallows (and to be no graph output); a Conv
// that already has an activation takes nothing more, since the residual is added before the activation.
#include <optional>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

bool is_fusable_activation(const std::string& op) {
  return op == "Relu" || op == "LeakyRelu" || op == "Clip" || op == "Sigmoid" || op == "HardSigmoid" ||
         op == "HardSwish" || op == "Tanh";
}

// A constant that only varies along the channel axis of a Conv output: [C], [C,1,1] or [1,C,1,1] style.
bool is_per_channel(const Shape& constant, const Shape& conv_out) {
  if (constant.size() > conv_out.size() || element_count(constant) != conv_out[1]) return false;
  const std::size_t lead = conv_out.size() - constant.size();
  for (std::size_t d = 0; d < constant.size(); ++d)
    if (constant[d] != 1 && lead + d != 1) return false;
  return true;
}

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g), consumers_(consumer_counts(g)) {}

  void run() {
    slots_.assign(g_.nodes.begin(), g_.nodes.end());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Node& node = *slots_[i];
      if (node.op == "Add") fuse_add(i);
      else if (is_fusable_activation(node.op)) fuse_activation(i);
      if (slots_[i])
        for (const auto& out : slots_[i]->outputs) producer_[out] = i;
    }
    g_.nodes.clear();
    for (auto& slot : slots_)
      if (slot) g_.nodes.push_back(std::move(*slot));
  }

 private:
  // The Conv (slot index) that produces `value` and may still take an Add or activation, if any.
  std::optional<std::size_t> open_conv(const std::string& value) const {
    auto p = producer_.find(value);
    if (p == producer_.end() || !slots_[p->second]) return std::nullopt;
    const Node& conv = *slots_[p->second];
    if (conv.op != "Conv" || !conv.attrs.s("activation", "").empty() || !has_single_use(g_, consumers_, value))
      return std::nullopt;
    return p->second;
  }

  void fuse_add(std::size_t at) {
    const Node add = *slots_[at];
    for (std::size_t side = 0; side < 2; ++side) {
      const std::string& conv_out = add.inputs[side];
      const std::string& other = add.inputs[1 - side];
      const auto c = open_conv(conv_out);
      if (!c) continue;
      Node& conv = *slots_[*c];
      const Shape& out_shape = g_.shape_of(conv_out);
      if (g_.is_constant(other) && is_per_channel(g_.shape_of(other), out_shape)) {
        add_to_bias(conv, g_.constants.at(other).f32);
        swallow(*c, add, "bias");
        slots_[at].reset();  // the Conv stays where it is: the Add's readers all come later
        return;
      }
      if (!g_.is_constant(other) && conv.inputs[3].empty() && g_.shape_of(other) == out_shape) {
        conv.inputs[3] = other;
        swallow(*c, add, "residual");
        slots_[at] = std::move(conv);  // runs where the Add did, once `other` exists
        slots_[*c].reset();
        return;
      }
    }
  }

  void add_to_bias(Node& conv, const std::vector<float>& per_channel) {
    const Tensor& w = g_.constants.at(conv.inputs[1]);
    Tensor bias;
    bias.shape = {w.shape[0]};
    bias.f32.assign(per_channel.begin(), per_channel.end());
    if (!conv.inputs[2].empty())
      for (std::size_t o = 0; o < bias.f32.size(); ++o) bias.f32[o] += g_.constants.at(conv.inputs[2]).f32[o];
    std::string name = conv.name + ".bias_fused";
    for (int i = 1; g_.is_constant(name); ++i) name = conv.name + ".bias_fused_" + std::to_string(i);
    g_.constants[name] = std::move(bias);
    conv.inputs[2] = name;
  }

  void fuse_activation(std::size_t at) {
    const Node act = *slots_[at];
    const auto c = open_conv(act.inputs[0]);
    if (!c) return;
    Node& conv = *slots_[*c];
    conv.attrs.values["activation"] = act.op;
    if (act.op == "LeakyRelu" || act.op == "HardSigmoid") {
      conv.attrs.values["act_alpha"] = act.attrs.f("alpha", 0.f);
      conv.attrs.values["act_beta"] = act.attrs.f("beta", 0.f);
    } else if (act.op == "Clip") {
      conv.attrs.values["act_alpha"] = act.attrs.f("min", 0.f);
      conv.attrs.values["act_beta"] = act.attrs.f("max", 0.f);
    }
    swallow(*c, act, "activation");
    slots_[at].reset();
  }

  // The Conv takes over the swallowed node's output name, so that its readers (and graph outputs) still find it.
  void swallow(std::size_t conv_slot, const Node& swallowed, const char* role) {
    Node& conv = *slots_[conv_slot];
    g_.rewrites.push_back("fused " + std::string(role) + " " + swallowed.where() + " into " + conv.where());
    conv.outputs[0] = swallowed.outputs[0];
    producer_[conv.outputs[0]] = conv_slot;
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::vector<std::optional<Node>> slots_;
  std::map<std::string, std::size_t> producer_;
};

}  // namespace

void fuse_conv(Graph& g) { Fuser(g).run(); }

}  // namespace sluice::nn::passes
