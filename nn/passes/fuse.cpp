// Conv and Linear fusions, so that Y = activation(conv(X, W) + B + R), or activation(X W + B + R), runs as one
// node (the "host"):
//   host -> Add(per-channel constant)   the constant joins the bias B
//   host -> Mul(per-channel constant)   W and B are scaled by it (ConvNeXt's layer scale); not after a residual
//   host -> Add(value of the same shape) the value becomes the residual input R (ResNet's identity branch,
//                                        a transformer's skip connection)
//   host -> activation                   the activation becomes the host's "activation" attribute
// Each needs the host's output to feed only the node it swallows (and to be no graph output); a host
// that already has an activation takes nothing more, since the residual is added before the activation.
// "Per channel" is along dim 1 of a Conv's output and along the last dim of a Linear's.
#include <optional>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

std::size_t channel_axis(const Node& host, const Shape& out) { return host.op == Op::Conv ? 1 : out.size() - 1; }

// A constant that only varies along the host output's channel axis ([C,1,1] or [1,C,1,1] for a Conv, [C] or
// [1,1,C] for a Linear), or a scalar.
bool is_per_channel(const Shape& constant, const Shape& out, std::size_t axis) {
  const std::int64_t count = element_count(constant);
  if (constant.size() > out.size() || (count != out[axis] && count != 1)) return false;
  const std::size_t lead = out.size() - constant.size();
  for (std::size_t d = 0; d < constant.size(); ++d)
    if (constant[d] != 1 && lead + d != axis) return false;
  return true;
}

// The constant's values, one per channel (a scalar repeated).
std::vector<float> per_channel_values(const Tensor& t, std::int64_t channels) {
  if (t.f32.size() == 1) return std::vector<float>(static_cast<std::size_t>(channels), t.f32[0]);
  return t.f32;
}

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g), consumers_(consumer_counts(g)) {}

  void run() {
    slots_.assign(g_.nodes.begin(), g_.nodes.end());
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Node& node = *slots_[i];
      if (node.op == Op::Add) fuse_add(i);
      else if (node.op == Op::Mul) fuse_scale(i);
      else if (is_activation(node.op)) fuse_activation(i);
      if (slots_[i])
        for (const auto& out : slots_[i]->outputs) producer_[out] = i;
    }
    g_.nodes.clear();
    for (auto& slot : slots_)
      if (slot) g_.nodes.push_back(std::move(*slot));
  }

 private:
  // The host (slot index) that produces `value` and may still take an Add, Mul or activation, if any.
  std::optional<std::size_t> open_host(const std::string& value) const {
    auto p = producer_.find(value);
    if (p == producer_.end() || !slots_[p->second]) return std::nullopt;
    const Node& host = *slots_[p->second];
    if ((host.op != Op::Conv && host.op != Op::Linear) || !host.attrs.s("activation", "").empty() ||
        !has_single_use(g_, consumers_, value))
      return std::nullopt;
    return p->second;
  }

  // The per-channel constant operand of a binary node whose other operand `host_out` a host produces.
  const Tensor* channel_constant(const Node& host, const std::string& host_out, const std::string& other) const {
    if (!g_.is_constant(other)) return nullptr;
    const Tensor& t = g_.constants.at(other);
    const Shape& out = g_.shape_of(host_out);
    if (t.type != ElementType::f32 || !is_per_channel(t.shape, out, channel_axis(host, out))) return nullptr;
    return &t;
  }

  void fuse_add(std::size_t at) {
    const Node add = *slots_[at];
    for (std::size_t side = 0; side < 2; ++side) {
      const std::string& host_out = add.inputs[side];
      const std::string& other = add.inputs[1 - side];
      const auto c = open_host(host_out);
      if (!c) continue;
      Node& host = *slots_[*c];
      const Shape& out_shape = g_.shape_of(host_out);
      if (const Tensor* bias = channel_constant(host, host_out, other)) {
        add_to_bias(host, per_channel_values(*bias, channels(host)));
        swallow(*c, add, "bias");
        slots_[at].reset();  // the host stays where it is: the Add's readers all come later
        return;
      }
      if (!g_.is_constant(other) && host.inputs[3].empty() && g_.shape_of(other) == out_shape) {
        host.inputs[3] = other;
        swallow(*c, add, "residual");
        slots_[at] = std::move(host);  // runs where the Add did, once `other` exists
        slots_[*c].reset();
        return;
      }
    }
  }

  // (X W + B) * s = X (W s) + B s, per output channel; a residual would be scaled too, so not after one.
  void fuse_scale(std::size_t at) {
    const Node mul = *slots_[at];
    for (std::size_t side = 0; side < 2; ++side) {
      const auto c = open_host(mul.inputs[side]);
      if (!c || !slots_[*c]->inputs[3].empty()) continue;
      Node& host = *slots_[*c];
      const Tensor* scale = channel_constant(host, mul.inputs[side], mul.inputs[1 - side]);
      if (!scale) continue;
      const std::vector<float> s = per_channel_values(*scale, channels(host));
      Tensor w = g_.constants.at(host.inputs[1]);
      const std::size_t per = w.f32.size() / s.size();  // Conv: OIHW, each O a run; Linear: [K, N], N a row
      for (std::size_t i = 0; i < w.f32.size(); ++i) w.f32[i] *= host.op == Op::Conv ? s[i / per] : s[i % s.size()];
      host.inputs[1] = add_constant(g_, host.name, "weight_scaled", std::move(w));
      if (!host.inputs[2].empty()) {
        Tensor b = g_.constants.at(host.inputs[2]);
        for (std::size_t o = 0; o < s.size(); ++o) b.f32[o] *= s[o];
        host.inputs[2] = add_constant(g_, host.name, "bias_scaled", std::move(b));
      }
      swallow(*c, mul, "scale");
      slots_[at].reset();
      return;
    }
  }

  // Output channels: a Conv's W is OIHW, a Linear's [K, N].
  std::int64_t channels(const Node& host) const {
    const Tensor& w = g_.constants.at(host.inputs[1]);
    return host.op == Op::Conv ? w.shape[0] : w.shape[1];
  }

  void add_to_bias(Node& host, const std::vector<float>& per_channel) {
    Tensor bias;
    bias.shape = {channels(host)};
    bias.f32.assign(per_channel.begin(), per_channel.end());
    if (!host.inputs[2].empty())
      for (std::size_t o = 0; o < bias.f32.size(); ++o) bias.f32[o] += g_.constants.at(host.inputs[2]).f32[o];
    host.inputs[2] = add_constant(g_, host.name, "bias_fused", std::move(bias));
  }

  void fuse_activation(std::size_t at) {
    const Node act = *slots_[at];
    const auto c = open_host(act.inputs[0]);
    if (!c) return;
    Node& conv = *slots_[*c];
    conv.attrs.values["activation"] = op_name(act.op);
    // The node's own parameters (canonical: written out) under the op table's names become act_alpha/act_beta.
    const OpInfo& info = op_info(act.op);
    if (info.alpha_attr) conv.attrs.values["act_alpha"] = act.attrs.f(info.alpha_attr, 0.f);
    if (info.beta_attr) conv.attrs.values["act_beta"] = act.attrs.f(info.beta_attr, 0.f);
    swallow(*c, act, "activation");
    slots_[at].reset();
  }

  // The host takes over the swallowed node's output name, so that its readers (and graph outputs) still find it.
  void swallow(std::size_t host_slot, const Node& swallowed, const char* role) {
    Node& host = *slots_[host_slot];
    g_.rewrites.push_back("fused " + std::string(role) + " " + swallowed.where() + " into " + host.where());
    host.outputs[0] = swallowed.outputs[0];
    producer_[host.outputs[0]] = host_slot;
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::vector<std::optional<Node>> slots_;
  std::map<std::string, std::size_t> producer_;
};

}  // namespace

void fuse_epilogues(Graph& g) { Fuser(g).run(); }

}  // namespace sluice::nn::passes
