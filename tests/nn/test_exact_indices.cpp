// nn/exact_indices.*: which run-time values hold positions (kept f32 by an f16/bf16 CUDA engine) and the
// conversions inserted for their other readers. The decision is the backends' one place for it; the CUDA engine's
// use of it runs in tests/gpu/test_nn_ops_gpu.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "nn/cpu/engine.hpp"
#include "nn/exact_indices.hpp"
#include "nn/passes.hpp"
#include "tests/nn/model_builder.hpp"

using namespace sluice::nn;
using sluice::nn::test::ModelBuilder;
using sluice::nn::test::set_int;

namespace {

const Node& first_of(const Graph& g, Op op) {
  auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; });
  REQUIRE(it != g.nodes.end());
  return *it;
}
std::size_t position_of(const Graph& g, Op op) {
  return static_cast<std::size_t>(
      std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; }) - g.nodes.begin());
}

// RT-DETR's query selection in small: TopK over the anchors' best score, its indices unsqueezed and repeated
// (torch's .repeat: Tile, which prepare() turns into Reshape, Mul by ones, Reshape) into GatherElements of the
// boxes; beside it, arithmetic with constants that stays index values (floor(i / 4) + 1, as a graph output),
// readers that take the indices as data (Sigmoid, an Add of run-time data), and ArgMax's indices as an output.
ModelBuilder detr_selection() {
  ModelBuilder m(13);
  m.input("scores", {-1, 40}).input("boxes", {-1, 40, 4});
  m.output("picked").output("squashed").output("mixed").output("next").output("best").output("idx");
  m.ints("k", {6}).ints("axes", {2}).ints("repeats", {1, 1, 4});
  m.weights("four", {1}, {4.f}).weights("one", {1}, {1.f});
  set_int(m.node("TopK", {"scores", "k"}, {"top", "idx"}), "axis", 1);
  m.node("Unsqueeze", {"idx", "axes"}, {"idx3"});
  m.node("Tile", {"idx3", "repeats"}, {"idx4"});
  set_int(m.node("GatherElements", {"boxes", "idx4"}, {"picked"}), "axis", 1);
  m.node("Sigmoid", {"idx"}, {"squashed"});
  m.node("Add", {"idx", "top"}, {"mixed"});
  m.node("Div", {"idx", "four"}, {"quarter"});
  m.node("Floor", {"quarter"}, {"whole"});
  m.node("Add", {"whole", "one"}, {"next"});
  set_int(m.node("ArgMax", {"scores"}, {"best"}), "axis", 1);
  return m;
}

}  // namespace

TEST_CASE("index_values: ranking outputs and what moves and arithmetic with constants make of them", "[nn][exact_indices]") {
  const Graph g = prepare(detr_selection().load(), 2);
  const auto index = index_values(g);
  const Node& top = first_of(g, Op::TopK);
  const Node& gather = first_of(g, Op::GatherElements);
  CHECK(index.count(top.outputs[1]));
  CHECK_FALSE(index.count(top.outputs[0]));  // the values are data
  CHECK(index.count(gather.inputs[1]));      // reached through Reshape, Mul by ones, Reshape
  CHECK_FALSE(index.count(gather.outputs[0]));
  CHECK(index.count(first_of(g, Op::ArgMax).outputs[0]));
  CHECK(index.count("quarter"));  // arithmetic with constants
  CHECK(index.count("whole"));
  CHECK(index.count("next"));
  CHECK_FALSE(index.count("squashed"));  // Sigmoid takes data
  CHECK_FALSE(index.count("mixed"));     // + run-time data
  CHECK_FALSE(index.count("scores"));
  for (const auto& in : g.inputs) CHECK_FALSE(index.count(in.name));
}

TEST_CASE("index_values: none without ArgMax, ArgMin or TopK", "[nn][exact_indices]") {
  ModelBuilder m(13);
  m.input("x", {-1, 3, 4}).output("y").ints("axes", {2});
  m.weights("two", {1}, {2.f});
  m.node("Mul", {"x", "two"}, {"m"});
  m.node("Unsqueeze", {"m", "axes"}, {"y"});
  const Graph g = prepare(m.load(), 1);
  CHECK(index_values(g).empty());
  const ExactIndices r = hold_indices_exactly(g);
  CHECK(r.index_values.empty());
  CHECK(r.graph.nodes.size() == g.nodes.size());
}

TEST_CASE("hold_indices_exactly gives readers that take data one converted copy", "[nn][exact_indices]") {
  const Graph g = prepare(detr_selection().load(), 2);
  const ExactIndices r = hold_indices_exactly(g);
  const std::string idx = first_of(g, Op::TopK).outputs[1];
  const std::string copy = idx + kIndexAsDataSuffix;
  CHECK(r.graph.nodes.size() == g.nodes.size() + 1);  // one conversion, shared by Sigmoid and the Add of data
  std::size_t readers = 0;
  for (const Node& n : r.graph.nodes) {
    for (const auto& in : n.inputs) readers += in == copy;
    if (n.outputs[0] == "squashed" || n.outputs[0] == "mixed") CHECK(n.inputs[0] == copy);
    if (n.op == Op::Div) CHECK(n.inputs[0] == idx);  // takes the index value itself
  }
  CHECK(readers == 2);
  CHECK(first_of(r.graph, Op::GatherElements).inputs[1] == first_of(g, Op::GatherElements).inputs[1]);
  const auto convert = std::find_if(r.graph.nodes.begin(), r.graph.nodes.end(),
                                    [&](const Node& n) { return !n.outputs.empty() && n.outputs[0] == copy; });
  REQUIRE(convert != r.graph.nodes.end());
  CHECK(convert->op == Op::Reshape);
  CHECK(convert->inputs == std::vector<std::string>{idx});
  CHECK(r.graph.shapes.at(copy) == g.shapes.at(idx));
  CHECK(static_cast<std::size_t>(convert - r.graph.nodes.begin()) > position_of(r.graph, Op::TopK));  // topological
  CHECK_FALSE(r.index_values.count(copy));
  CHECK(r.index_values == index_values(g));

  // The conversions change no number: the CPU engine gives the same outputs on both graphs.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  std::vector<std::vector<float>> inputs = {std::vector<float>(2 * 40), std::vector<float>(2 * 40 * 4)};
  for (auto& in : inputs)
    for (auto& v : in) v = std::round(dist(rng) * 4.f) / 4.f;  // ties too
  auto run = [&](const Graph& graph) {
    CpuEngine engine(graph);
    std::vector<std::vector<float>> out;
    for (const auto& o : graph.outputs) {
      std::size_t n = 1;
      for (auto d : o.shape) n *= static_cast<std::size_t>(d);
      out.emplace_back(n, std::nanf(""));
    }
    std::vector<float*> ptrs;
    for (auto& o : out) ptrs.push_back(o.data());
    engine.run({inputs[0].data(), inputs[1].data()}, ptrs);
    return out;
  };
  const auto want = run(g), got = run(r.graph);
  REQUIRE(want.size() == 6);
  CHECK(got == want);
  // And they are the right numbers: "next" is floor(idx / 4) + 1.
  for (std::size_t i = 0; i < want[3].size(); ++i) CHECK(want[3][i] == std::floor(want[5][i] / 4.f) + 1.f);
}
