#include <algorithm>
#include <limits>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {

void fail(const Graph& g, const Node& node, const std::string& what) {
  throw ModelError(g.source + ": " + node.where() + ": " + what);
}

std::map<std::string, int> consumer_counts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const auto& node : g.nodes)
    for (const auto& in : node.inputs)
      if (!in.empty()) ++counts[in];
  return counts;
}

bool is_graph_output(const Graph& g, const std::string& value) {
  return std::any_of(g.outputs.begin(), g.outputs.end(), [&](const ValueInfo& o) { return o.name == value; });
}

bool has_single_use(const Graph& g, const std::map<std::string, int>& consumers, const std::string& value) {
  auto it = consumers.find(value);
  return it != consumers.end() && it->second == 1 && !is_graph_output(g, value);
}

std::int64_t normalize_axis(const Graph& g, const Node& node, std::int64_t axis, std::int64_t rank, bool inclusive) {
  if (axis < -rank || axis > (inclusive ? rank : rank - 1))
    fail(g, node, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

const Tensor* constant_input(const Graph& g, const Node& node, std::size_t index) {
  if (index >= node.inputs.size() || node.inputs[index].empty()) return nullptr;
  auto it = g.constants.find(node.inputs[index]);
  return it == g.constants.end() ? nullptr : &it->second;
}

std::vector<std::int64_t> as_ints(const Tensor& t) {
  if (t.type == ElementType::i64) return t.i64;
  std::vector<std::int64_t> out;
  out.reserve(t.f32.size());
  // Truncation of a value from the file: NaN and values beyond int64 saturate (converting them is undefined),
  // and whatever reads them as sizes or axes refuses them.
  constexpr float kLimit = 9.2e18f;
  for (float v : t.f32)
    out.push_back(v != v ? 0 : v >= kLimit ? std::numeric_limits<std::int64_t>::max()
                           : v <= -kLimit ? std::numeric_limits<std::int64_t>::min() : static_cast<std::int64_t>(v));
  return out;
}

std::vector<float> as_floats(const Tensor& t) {
  if (t.type == ElementType::f32) return t.f32;
  std::vector<float> out;
  out.reserve(t.i64.size());
  for (auto v : t.i64) out.push_back(static_cast<float>(v));
  return out;
}

std::string join_ints(const std::vector<std::int64_t>& values) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(values[i]);
  }
  return out;
}

std::string unused_value_name(const Graph& g, const std::string& wanted) {
  std::string name = wanted;
  for (int i = 1; g.is_constant(name) || g.shapes.count(name); ++i) name = wanted + "_" + std::to_string(i);
  return name;
}

std::string add_constant(Graph& g, const std::string& owner, const std::string& role, Tensor t) {
  const std::string name = unused_value_name(g, owner + "." + role);
  g.constants[name] = std::move(t);
  return name;
}

}  // namespace sluice::nn::passes
