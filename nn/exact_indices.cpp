#include "nn/exact_indices.hpp"

#include <algorithm>
#include <map>

namespace sluice::nn {
namespace {

// Ops whose output, made from index values and constants only, is an index value (computed in f32).
bool keeps_indices(Op op) {
  switch (op) {
    case Op::Reshape: case Op::Transpose: case Op::Slice: case Op::Split: case Op::Concat:
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max: case Op::Min:
    case Op::Neg: case Op::Abs: case Op::Floor: case Op::Ceil:
      return true;
    default:
      return false;
  }
}

// Whether `node` reads input `slot` as an index value (given the index values found so far).
bool takes_index(const Node& node, std::size_t slot, const std::set<std::string>& index) {
  if (node.op == Op::GatherElements) return slot == 1;
  if (!keeps_indices(node.op)) return false;
  return !node.outputs.empty() && index.count(node.outputs[0]) != 0;
}

}  // namespace

std::set<std::string> index_values(const Graph& g) {
  std::set<std::string> index;
  for (const Node& n : g.nodes) {  // topological order: one pass reaches every value made from the seeds
    if (n.op == Op::ArgMax || n.op == Op::ArgMin) {
      index.insert(n.outputs.at(0));
    } else if (n.op == Op::TopK) {
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) index.insert(n.outputs[1]);
    } else if (keeps_indices(n.op)) {
      bool any = false, all = true;
      for (const auto& in : n.inputs) {
        if (in.empty()) continue;
        if (index.count(in)) any = true;
        else if (!g.is_constant(in)) all = false;
      }
      if (any && all)
        for (const auto& out : n.outputs)
          if (!out.empty()) index.insert(out);
    }
  }
  return index;
}

ExactIndices hold_indices_exactly(const Graph& prepared) {
  ExactIndices r{prepared, index_values(prepared)};
  if (r.index_values.empty()) return r;
  Graph& g = r.graph;
  std::map<std::string, std::string> as_data;  // index value -> its converted copy
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (Node node : g.nodes) {
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const std::string& in = node.inputs[i];
      if (in.empty() || !r.index_values.count(in) || takes_index(node, i, r.index_values)) continue;
      auto it = as_data.find(in);
      if (it == as_data.end()) {
        Node convert;
        convert.op = Op::Reshape;
        convert.name = in + kIndexAsDataSuffix;
        convert.inputs = {in};
        convert.outputs = {in + kIndexAsDataSuffix};
        const Shape& shape = g.shapes.at(in);
        convert.attrs.values["shape"] = std::vector<std::int64_t>(shape.begin(), shape.end());
        g.shapes[convert.outputs[0]] = shape;
        nodes.push_back(convert);  // right before its first reader: after the value's producer
        it = as_data.emplace(in, convert.outputs[0]).first;
      }
      node.inputs[i] = it->second;
    }
    nodes.push_back(std::move(node));
  }
  g.nodes = std::move(nodes);
  if (!as_data.empty())
    g.rewrites.push_back("inserted " + std::to_string(as_data.size()) +
                         " conversion(s) of index values for readers that take data (nn/exact_indices.hpp)");
  return r;
}

}  // namespace sluice::nn
