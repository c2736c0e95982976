// The op table (nn/ops.hpp): its entries are consistent, the loader takes exactly its ONNX ops, and every
// elementwise op in it runs on the CPU backend like the scalar reference the table names (tests/nn/
// op_table_cases.hpp; the CUDA twin is in tests/gpu/test_nn_ops_gpu.cpp, tag [op_table]).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "nn/cpu/engine.hpp"
#include "nn/onnx_loader.hpp"
#include "tests/nn/model_builder.hpp"
#include "tests/nn/op_table_cases.hpp"

using namespace sluice::nn;
using namespace sluice::nn::test;
using Catch::Matchers::Contains;

namespace {

std::vector<Op> all_ops() {
  std::vector<Op> ops;
  for (int i = 1; i < static_cast<int>(Op::count_); ++i) ops.push_back(static_cast<Op>(i));
  return ops;
}

// Distance in units in the last place (same-signed floats; NaN only equals NaN).
std::int64_t ulp_distance(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
  if (a == b) return 0;
  auto key = [](float f) {
    std::int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return i < 0 ? static_cast<std::int64_t>(INT32_MIN) - i : static_cast<std::int64_t>(i);
  };
  return std::abs(key(a) - key(b));
}

std::vector<float> run_cpu_graph(const Graph& g, const std::vector<std::vector<float>>& inputs) {
  CpuEngine engine(g);
  std::vector<float> y(static_cast<std::size_t>(element_count(g.outputs[0].shape)), std::nanf(""));
  std::vector<const float*> in;
  for (const auto& i : inputs) in.push_back(i.data());
  std::vector<float*> out{y.data()};
  engine.run(in, out);
  return y;
}

}  // namespace

TEST_CASE("Every op table entry round-trips name -> Op -> name", "[op_table]") {
  std::set<std::string> names;
  for (const Op op : all_ops()) {
    const std::string& name = op_name(op);
    INFO(name);
    CHECK(op_info(op).op == op);
    CHECK(op_from_name(name) == op);
    CHECK(names.insert(name).second);  // unique
    CHECK(!name.empty());
    CHECK(op_info(op).min_inputs <= op_info(op).max_inputs);
    CHECK(op_info(op).max_outputs >= 1);
  }
  CHECK(op_from_name("unknown") == Op::unknown);
  CHECK(op_from_name("NoSuchOp") == Op::unknown);
  CHECK(op_from_name("relu") == Op::unknown);  // ONNX names are case-sensitive
  CHECK(op_name(Op::unknown) == "unknown");
  CHECK(op_name(Op::count_) == "unknown");  // out of range reads as unknown, never past the table
}

TEST_CASE("The loader accepts exactly the op table's ONNX ops", "[op_table]") {
  std::vector<std::string> from_table;
  for (const Op op : all_ops())
    if (has_flag(op, kFromOnnx)) from_table.push_back(op_name(op));
  std::sort(from_table.begin(), from_table.end());
  CHECK(supported_onnx_ops() == from_table);
  // Each is taken by the loader (past the op check: at most an arity or attribute complaint), and every op the
  // loader takes maps to its table entry.
  for (const Op op : all_ops()) {
    INFO(op_name(op));
    ModelBuilder m(17);
    m.input("x", {1, 2});
    std::vector<std::string> inputs(op_info(op).min_inputs, "x");
    m.node(op_name(op), inputs, {"y"});
    m.output("y");
    const std::string e = error_of([&] {
      const Graph g = m.load();
      REQUIRE(g.nodes.size() == (op == Op::Constant ? 0u : 1u));
      if (!g.nodes.empty()) CHECK(g.nodes[0].op == op);
    });
    if (has_flag(op, kFromOnnx)) CHECK_THAT(e, !Contains("is not supported"));
    else CHECK_THAT(e, Contains("operator " + op_name(op) + " is not supported"));
  }
}

TEST_CASE("The op table's maths kinds are consistent", "[op_table]") {
  std::set<int> unary, binary, reduce, activation;
  for (const Op op : all_ops()) {
    INFO(op_name(op));
    const int kinds = (unary_math_of(op) ? 1 : 0) + (binary_math_of(op) ? 1 : 0) + (reduce_math_of(op) ? 1 : 0) +
                      (activation_of(op) ? 1 : 0);
    CHECK(kinds <= 1);
    if (const auto u = unary_math_of(op)) CHECK(unary.insert(static_cast<int>(*u)).second);
    if (const auto b = binary_math_of(op)) CHECK(binary.insert(static_cast<int>(*b)).second);
    if (const auto r = reduce_math_of(op)) CHECK(reduce.insert(static_cast<int>(*r)).second);
    if (const auto a = activation_of(op)) {
      CHECK(activation.insert(static_cast<int>(*a)).second);
      CHECK(*a != ActivationKind::none);
      CHECK(op_of(*a) == op);
    }
    if (!has_flag(op, kActivation)) CHECK(op_info(op).alpha_attr == nullptr);
  }
  // Every kind of each maths enum has its op (gelu is made by prepare()).
  CHECK(unary.size() == static_cast<std::size_t>(UnaryMath::gelu) + 1);
  CHECK(binary.size() == static_cast<std::size_t>(BinaryMath::min) + 1);
  CHECK(reduce.size() == static_cast<std::size_t>(ReduceMath::prod) + 1);
  CHECK(activation.size() == static_cast<std::size_t>(ActivationKind::tanh));
  CHECK(op_of(ActivationKind::none) == Op::unknown);
}

TEST_CASE("Fused activation attributes read the op table's defaults", "[op_table]") {
  Attributes none;
  CHECK(fused_activation_params(none)->kind == ActivationKind::none);
  Attributes leaky;
  leaky.values["activation"] = std::string("LeakyRelu");
  CHECK(fused_activation_params(leaky)->kind == ActivationKind::leaky_relu);
  CHECK(fused_activation_params(leaky)->alpha == 0.01f);
  Attributes clip;
  clip.values["activation"] = std::string("Clip");
  clip.values["act_beta"] = 6.f;
  CHECK(fused_activation_params(clip)->alpha == -INFINITY);
  CHECK(fused_activation_params(clip)->beta == 6.f);
  Attributes bad;
  bad.values["activation"] = std::string("Softmax");
  CHECK(!fused_activation_params(bad));
}

TEST_CASE("Every elementwise op of the op table runs on the CPU like its scalar reference", "[op_table][cpu_ops]") {
  const auto ops = elementwise_table_ops();
  REQUIRE(ops.size() >= 24);  // 7 activations, 10 unary maths (Gelu too), 7 binary
  std::mt19937 rng(13);
  for (const Op op : ops) {
    for (const Attributes& attrs : attribute_variants(op)) {
      for (int trial = 0; trial < 12; ++trial) {
        const ElementwiseShapes s = random_shapes(is_binary(op), rng);
        const Graph g = elementwise_graph(op, attrs, s);
        INFO(g.source << " attrs " << attrs.values.size() << " trial " << trial);
        std::vector<std::vector<float>> inputs;
        for (int operand = 0; operand < (s.b.empty() ? 1 : 2); ++operand) {
          const Shape& shape = operand == 0 ? s.a : s.b;
          inputs.emplace_back(static_cast<std::size_t>(element_count(shape)));
          for (float& v : inputs.back()) v = random_operand(op, operand, rng);
        }
        const auto want = reference_output(op, attrs, s, inputs);
        const auto got = run_cpu_graph(g, inputs);
        std::int64_t worst = 0;
        std::size_t at = 0;
        for (std::size_t i = 0; i < want.size(); ++i)
          if (const auto d = ulp_distance(got[i], want[i]); d > worst) worst = d, at = i;
        INFO("element " << at << ": got " << got[at] << ", want " << want[at]);
        CHECK(worst <= 2);  // the same scalar function: equal but for the compiler's vectorised maths
      }
    }
  }
}
