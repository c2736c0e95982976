// Add(Reshape(P), R) with P made by a Conv or Linear and R of the Reshape's shape becomes
// Reshape(Add(P, Reshape(R))): the Add then reads the product directly, and fuse.cpp makes it the product's
// residual (a transformer's skip connection after the attention's out-projection, which works on rows
// [B*S, E] and is reshaped back to [B, S, E]). Reshapes move no data, so the rewrite costs nothing; it needs the
// Reshape's output to be read only by the Add and be no graph output.
#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

class ReshapeSinker {
 public:
  explicit ReshapeSinker(Graph& g) : g_(g), consumers_(consumer_counts(g)) {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& out : g_.nodes[i].outputs) producer_[out] = i;
  }

  void run() {
    std::map<std::size_t, std::vector<Node>> replaced;  // Add -> what replaces it
    std::vector<bool> dropped(g_.nodes.size(), false);  // the Reshapes moved after them
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].op == Op::Add && g_.nodes[i].inputs.size() == 2)
        if (auto nodes = sunk(g_.nodes[i], dropped)) replaced[i] = std::move(*nodes);
    std::vector<Node> out;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      if (auto it = replaced.find(i); it != replaced.end())
        for (Node& n : it->second) out.push_back(std::move(n));
      else if (!dropped[i])
        out.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(out);
  }

 private:
  const Node* producer(const std::string& value) const {
    auto it = producer_.find(value);
    return it == producer_.end() ? nullptr : &g_.nodes[it->second];
  }

  std::optional<std::vector<Node>> sunk(const Node& add, std::vector<bool>& dropped) {
    for (std::size_t side = 0; side < 2; ++side) {
      const std::string &reshaped = add.inputs[side], &other = add.inputs[1 - side];
      const Node* reshape = producer(reshaped);
      if (!reshape || reshape->op != Op::Reshape || !has_single_use(g_, consumers_, reshaped)) continue;
      const std::string& product = reshape->inputs.at(0);
      const Node* host = producer(product);
      if (!host || (host->op != Op::Conv && host->op != Op::Linear) || g_.is_constant(other) ||
          g_.shape_of(other) != g_.shape_of(reshaped))
        continue;
      const Shape& inner = g_.shape_of(product);
      const std::string residual_name = unused_value_name(g_, add.name + "/residual");
      Node residual{residual_name, Op::Reshape, {other}, {residual_name}, {}};
      residual.attrs.values["shape"] = std::vector<std::int64_t>(inner.begin(), inner.end());
      g_.shapes[residual.outputs[0]] = inner;
      Node sum{add.name, Op::Add, {product, residual.outputs[0]}, {unused_value_name(g_, add.name + "/sum")}, {}};
      g_.shapes[sum.outputs[0]] = inner;
      Node back{add.name + "/reshape", Op::Reshape, {sum.outputs[0]}, add.outputs, reshape->attrs};
      dropped[producer_.at(reshaped)] = true;
      g_.rewrites.push_back("moved " + reshape->where() + " after " + add.where() +
                            " so that the Add reads the product it can join");
      return std::vector<Node>{std::move(residual), std::move(sum), std::move(back)};
    }
    return std::nullopt;
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::map<std::string, std::size_t> producer_;
};

}  // namespace

void sink_reshapes(Graph& g) { ReshapeSinker(g).run(); }

}  // namespace sluice::nn::passes
