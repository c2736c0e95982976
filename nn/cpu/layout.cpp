#include "nn/cpu/layout.hpp"

#include <numeric>
#include <set>
#include <vector>

namespace sluice::nn::cpu {

namespace {

// Values that must be in one layout together: union-find over value ids.
struct Groups {
  std::vector<std::size_t> parent;
  std::size_t find(std::size_t v) {
    while (parent[v] != v) v = parent[v] = parent[parent[v]];
    return v;
  }
  void join(std::size_t a, std::size_t b) { parent[find(a)] = find(b); }
};

}  // namespace

LayoutPlan plan_layouts(const Graph& g, bool channels_last) {
  LayoutPlan plan;
  if (!channels_last) return plan;

  std::map<std::string, std::size_t> ids;
  std::vector<bool> eligible;  // 4-D data made by a node, not a graph input or output
  for (const Node& node : g.nodes)
    for (const std::string& out : node.outputs) {
      auto shape = g.shapes.find(out);
      ids.emplace(out, eligible.size());
      eligible.push_back(shape != g.shapes.end() && shape->second.size() == 4);
    }
  for (const ValueInfo& o : g.outputs)
    if (ids.count(o.name)) eligible[ids[o.name]] = false;
  Groups groups{std::vector<std::size_t>(eligible.size())};
  std::iota(groups.parent.begin(), groups.parent.end(), std::size_t{0});

  auto id_of = [&](const std::string& value) -> const std::size_t* {
    auto it = ids.find(value);
    return it == ids.end() ? nullptr : &it->second;
  };
  auto refuse = [&](const std::string& value) {
    if (auto id = id_of(value)) eligible[*id] = false;
  };
  auto tie = [&](const std::string& a, const std::string& b) {
    auto ia = id_of(a), ib = id_of(b);
    if (ia && ib) groups.join(*ia, *ib);
    else refuse(a), refuse(b);  // a graph input or constant is NCHW, so the other must be too
  };

  for (const Node& node : g.nodes) {
    const auto& in = node.inputs;
    const auto& out = node.outputs;
    if (node.op == Op::Conv) {
      // X and Y each in either layout (the layer reorders where oneDNN has no kernel for the pair); the
      // residual is summed into Y in place, so it shares Y's layout.
      if (in.size() > 3 && !in[3].empty()) tie(in[3], out[0]);
    } else if (node.op == Op::ConvTranspose) {
      // X and Y each in either layout (oneDNN's deconvolution takes any pair).
    } else if (node.op == Op::GlobalAveragePool) {
      refuse(out[0]);  // reads either layout; its [N, C, 1, 1] output is the same bytes in both
    } else if ((is_activation(node.op) || node.op == Op::MaxPool || node.op == Op::AveragePool) && in.size() == 1 &&
               out.size() == 1) {
      tie(in[0], out[0]);  // elementwise, or pooling that has a loop for each layout
    } else if ((node.op == Op::Add || node.op == Op::Sub || node.op == Op::Mul || node.op == Op::Div) && in.size() == 2 &&
               out.size() == 1 && !g.is_constant(in[0]) && !g.is_constant(in[1]) &&
               g.shape_of(in[0]) == g.shape_of(out[0]) && g.shape_of(in[1]) == g.shape_of(out[0])) {
      tie(in[0], out[0]);  // no broadcasting: elementwise too
      tie(in[1], out[0]);
    } else {
      for (const auto& v : in) refuse(v);
      for (const auto& v : out) refuse(v);
    }
  }

  std::vector<bool> group_ok(eligible.size(), true);
  for (std::size_t v = 0; v < eligible.size(); ++v)
    if (!eligible[v]) group_ok[groups.find(v)] = false;
  for (const auto& [name, id] : ids)
    if (group_ok[groups.find(id)]) plan.nhwc_values.emplace(name, Layout::nhwc);
  return plan;
}

}  // namespace sluice::nn::cpu
