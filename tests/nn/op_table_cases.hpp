#pragma once
// Table-driven cases for the elementwise ops of the op table (nn/ops.hpp): every op the backends run that is an
// activation, a unary maths op or a binary maths op, on random shapes (odd sizes, rank 1 to 5, numpy
// broadcasting for the binary ops), inputs in each op's domain, and the scalar reference the op table names
// (nn/activation_math.hpp, nn/elementwise_math.hpp: the very functions constant folding uses). Shared by the CPU
// test (tests/nn/test_op_table.cpp) and the CUDA test (tests/gpu/test_nn_ops_gpu.cpp, "[op_table]").
// A new elementwise op in the table is picked up here without any change.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "nn/graph.hpp"
#include "nn/ops.hpp"

namespace sluice::nn::test {

// The ops these cases cover: run by the backends and elementwise (activation, unary or binary maths).
inline std::vector<Op> elementwise_table_ops() {
  std::vector<Op> ops;
  for (int i = 1; i < static_cast<int>(Op::count_); ++i) {
    const Op op = static_cast<Op>(i);
    if (has_flag(op, kRuns) && (has_flag(op, kActivation) || has_flag(op, kUnaryMath) || has_flag(op, kBinaryMath)))
      ops.push_back(op);
  }
  return ops;
}

inline bool is_binary(Op op) { return has_flag(op, kBinaryMath); }

// Attribute sets to run an op with: the defaults (none given) and, for ops with parameters, other values.
inline std::vector<Attributes> attribute_variants(Op op) {
  std::vector<Attributes> v(1);
  const OpInfo& info = op_info(op);
  if (op == Op::Clip) {
    Attributes a;
    a.values["min"] = -0.5f;
    a.values["max"] = 0.25f;
    v.push_back(a);
    Attributes only_max;
    only_max.values["max"] = 1.5f;
    v.push_back(only_max);
  } else if (info.alpha_attr) {
    Attributes a;
    a.values[info.alpha_attr] = 0.3f;
    if (info.beta_attr) a.values[info.beta_attr] = 0.4f;
    v.push_back(a);
  }
  return v;
}

// A random input of `op` (operand 0 or 1) in its domain: positive for Sqrt and Log, away from zero for divisors,
// Pow's bases positive and its exponents sometimes exactly 2 (its a * a case).
inline float random_operand(Op op, int operand, std::mt19937& rng) {
  auto uniform = [&](float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); };
  auto away_from_zero = [&] { return (rng() % 2 ? 1.f : -1.f) * uniform(0.25f, 4.f); };
  switch (op) {
    case Op::Sqrt:
    case Op::Log: return uniform(0.05f, 4.f);
    case Op::Reciprocal: return away_from_zero();
    case Op::Div: return operand == 1 ? away_from_zero() : uniform(-4.f, 4.f);
    case Op::Pow: return operand == 0 ? uniform(0.1f, 2.f) : (rng() % 3 == 0 ? 2.f : uniform(-2.f, 2.f));
    default: return uniform(-4.f, 4.f);
  }
}

// The scalar reference of `op` with `attrs` (the op table's parameter names and defaults).
inline float reference(Op op, const Attributes& attrs, float a, float b) {
  if (is_activation(op)) return activate(activation_params(op, attrs), a);
  if (const auto u = unary_math_of(op)) return apply_unary_math(*u, a);
  return apply_binary_math(*binary_math_of(op), a, b);
}

struct ElementwiseShapes {
  Shape a, b, y;  // b is empty for a unary op
};

// Random shapes: rank 1-5, odd sizes (1, 2, 3, 5, 7, 13, 31); for binary ops b is y, or y with some dimensions
// 1 and leading ones dropped, and a broadcasts too in some cases (both ways at once; a never along dim 0).
inline ElementwiseShapes random_shapes(bool binary, std::mt19937& rng) {
  static const std::int64_t sizes[] = {1, 2, 3, 5, 7, 13, 31};
  const int rank = 1 + static_cast<int>(rng() % 5);
  Shape y(static_cast<std::size_t>(rank));
  std::int64_t total = 1;
  for (auto& d : y) {
    d = sizes[rng() % 7];
    if (total * d > 20000) d = 1;  // keep a case small
    total *= d;
  }
  ElementwiseShapes s{y, {}, y};
  if (!binary) return s;
  s.b = y;
  const unsigned mode = rng() % 4;  // 0: same shape; 1: b broadcasts; 2: a broadcasts; 3: both
  if (mode == 1 || mode == 3)
    for (auto& d : s.b)
      if (rng() % 2) d = 1;
  if (mode == 2 || mode == 3)
    for (std::size_t i = 1; i < s.a.size(); ++i)  // a keeps dim 0: the batch engines count items by
      if (rng() % 2 && s.b[i] != 1) s.a[i] = 1;
  // drop leading 1s of b sometimes (numpy aligns to the right)
  while (s.b.size() > 1 && s.b.front() == 1 && rng() % 2) s.b.erase(s.b.begin());
  return s;
}

// Element `flat` of y read from x of shape `x` by numpy broadcasting.
inline std::int64_t broadcast_index(std::int64_t flat, const Shape& y, const Shape& x) {
  std::int64_t index = 0, stride = 1;
  for (std::size_t k = 0; k < y.size(); ++k) {
    const std::size_t d = y.size() - 1 - k;
    const std::int64_t coord = flat % y[d];
    flat /= y[d];
    if (k < x.size()) {
      const std::size_t xd = x.size() - 1 - k;
      if (x[xd] != 1) index += coord * stride;
      stride *= x[xd];
    }
  }
  return index;
}

// The one-node prepared graph of a case: inputs "a" (and "b"), output "y".
inline Graph elementwise_graph(Op op, const Attributes& attrs, const ElementwiseShapes& s) {
  Graph g;
  g.source = "op_table:" + op_name(op) + " " + to_string(s.a) + (s.b.empty() ? "" : " " + to_string(s.b));
  g.opset = 17;
  Node n;
  n.name = op_name(op) + "_0";
  n.op = op;
  n.attrs = attrs;
  n.inputs = {"a"};
  g.inputs.push_back({"a", s.a, ElementType::f32});
  g.shapes["a"] = s.a;
  if (!s.b.empty()) {
    n.inputs.push_back("b");
    g.inputs.push_back({"b", s.b, ElementType::f32});
    g.shapes["b"] = s.b;
  }
  n.outputs = {"y"};
  g.outputs.push_back({"y", s.y, ElementType::f32});
  g.shapes["y"] = s.y;
  g.nodes.push_back(std::move(n));
  return g;
}

// y by the reference, from inputs (already rounded to the element type the backend computes in).
inline std::vector<float> reference_output(Op op, const Attributes& attrs, const ElementwiseShapes& s,
                                           const std::vector<std::vector<float>>& inputs) {
  std::vector<float> y(static_cast<std::size_t>(element_count(s.y)));
  for (std::int64_t i = 0; i < static_cast<std::int64_t>(y.size()); ++i) {
    const float a = inputs[0][static_cast<std::size_t>(broadcast_index(i, s.y, s.a))];
    const float b = s.b.empty() ? 0.f : inputs[1][static_cast<std::size_t>(broadcast_index(i, s.y, s.b))];
    y[static_cast<std::size_t>(i)] = reference(op, attrs, a, b);
  }
  return y;
}

}  // namespace sluice::nn::test
