// The ops transformer-era detectors' exports add (issue 31: RT-DETR, MaxViT): Einsum (lowered by prepare()),
// GatherElements and GridSample, run through prepare() and the CPU engine against naive references written here
// with plain loops (no code shared with nn/), on random inputs from fixed seeds.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "nn/cpu/engine.hpp"
#include "nn/passes.hpp"
#include "tests/nn/cpu_run.hpp"
#include "tests/nn/model_builder.hpp"

namespace {

using sluice::nn::CpuEngine;
using sluice::nn::Graph;
using sluice::nn::Op;
using sluice::nn::Shape;
using Ints = std::vector<std::int64_t>;
using Floats = std::vector<float>;
using sluice::nn::test::error_of;
using sluice::nn::test::ModelBuilder;
using sluice::nn::test::set_int;
using sluice::nn::test::set_string;
using Catch::Matchers::Contains;

using sluice::nn::test::count;
using sluice::nn::test::random_floats;
using sluice::nn::test::ravel;
using sluice::nn::test::unravel;

// The model through prepare() at batch `batch` and the CPU engine, fed `inputs` in the graph's input order.
std::vector<Floats> run_prepared(const ModelBuilder& m, std::int64_t batch, const std::vector<Floats>& inputs) {
  CpuEngine engine(sluice::nn::prepare(m.load(), batch));
  return sluice::nn::test::run_engine(engine, inputs);
}

using sluice::nn::test::relative_error;

bool ops_absent(const Graph& g, Op op) {
  return std::none_of(g.nodes.begin(), g.nodes.end(), [&](const auto& n) { return n.op == op; });
}

// ---- Einsum ----------------------------------------------------------------------------------------------------

// numpy's einsum with plain loops over every combination of the indices of `equation` (letters only, explicit
// output); an operand's dimension of 1 broadcasts.
Floats einsum_reference(const std::string& equation, const std::vector<Shape>& shapes, const std::vector<Floats>& in) {
  const std::size_t arrow = equation.find("->");
  const std::string lhs = equation.substr(0, arrow), rhs = equation.substr(arrow + 2);
  std::vector<std::string> terms(1);
  for (char c : lhs)
    if (c == ',') terms.emplace_back();
    else terms.back() += c;
  std::map<char, std::int64_t> size;
  for (std::size_t i = 0; i < terms.size(); ++i)
    for (std::size_t d = 0; d < terms[i].size(); ++d) size[terms[i][d]] = std::max(size[terms[i][d]], shapes[i][d]);
  std::string letters;
  Shape extents;
  for (const auto& [c, s] : size) letters += c, extents.push_back(s);
  Shape out_shape;
  for (char c : rhs) out_shape.push_back(size[c]);
  std::vector<double> acc(static_cast<std::size_t>(count(out_shape)), 0.0);
  for (std::int64_t flat = 0; flat < count(extents); ++flat) {
    const Ints at = unravel(flat, extents);
    auto value_of = [&](char c) { return at[letters.find(c)]; };
    double product = 1;
    for (std::size_t i = 0; i < terms.size(); ++i) {
      Ints idx;
      for (std::size_t d = 0; d < terms[i].size(); ++d) idx.push_back(shapes[i][d] == 1 ? 0 : value_of(terms[i][d]));
      product *= in[i][static_cast<std::size_t>(ravel(idx, shapes[i]))];
    }
    Ints o;
    for (char c : rhs) o.push_back(value_of(c));
    acc[static_cast<std::size_t>(ravel(o, out_shape))] += product;
  }
  return Floats(acc.begin(), acc.end());
}

struct EinsumCase {
  std::string equation;   // as the model gives it
  std::string reference;  // the same with letters only and an explicit output
  std::vector<Shape> shapes;  // an operand whose dimension 0 is not operand 0's is an initializer (weights)
};

const std::vector<EinsumCase>& einsum_cases() {
  static const std::vector<EinsumCase> cases = {
      {"i,j->ij", "i,j->ij", {{5}, {7}}},                                               // RT-DETR's position embedding
      {"bhqd,bhkd->bhqk", "bhqd,bhkd->bhqk", {{2, 3, 5, 8}, {2, 3, 7, 8}}},              // attention scores
      {"bhqk,bhkd->bhqd", "bhqk,bhkd->bhqd", {{2, 3, 5, 7}, {2, 3, 7, 4}}},              // attention output
      {"B G H I D, B G H J D -> B G H I J", "BGHID,BGHJD->BGHIJ", {{2, 2, 3, 4, 5}, {2, 2, 3, 6, 5}}},  // MaxViT
      {"B G H I J, B G H J D -> B G H I D", "BGHIJ,BGHJD->BGHID", {{2, 2, 3, 4, 6}, {2, 2, 3, 6, 5}}},
      {"bij,bjk->bik", "bij,bjk->bik", {{3, 4, 5}, {3, 5, 6}}},
      {"bij,jk->bik", "bij,jk->bik", {{3, 4, 5}, {5, 6}}},                               // by weights
      {"ij,jk", "ij,jk->ik", {{4, 5}, {5, 3}}},                                           // implicit output
      {"ij->i", "ij->i", {{4, 6}}},
      {"ij->", "ij->", {{4, 6}}},
      {"ij->ji", "ij->ji", {{4, 6}}},
      {"bchw->bhwc", "bchw->bhwc", {{2, 3, 4, 5}}},
      {"...ij->...ji", "abij->abji", {{2, 3, 4, 5}}},
      {"...ij,...jk->...ik", "abij,abjk->abik", {{2, 3, 4, 5}, {2, 3, 5, 6}}},
      {"...ij,...jk->...ik", "abij,abjk->abik", {{2, 1, 4, 5}, {2, 3, 5, 6}}},           // broadcast batch
      {"...ij,...jk->...ik", "abij,abjk->abik", {{2, 3, 4, 5}, {2, 1, 5, 6}}},
      {"bij,bij->bij", "bij,bij->bij", {{2, 3, 4}, {2, 3, 4}}},                           // nothing contracted
      {"bi,bj->bij", "bi,bj->bij", {{3, 4}, {3, 5}}},
      {"abc,cd->ad", "abc,cd->ad", {{2, 3, 4}, {4, 5}}},                                  // b summed in one operand
      {"ij,jk,kl->il", "ij,jk,kl->il", {{3, 4}, {4, 5}, {5, 2}}},                         // three operands
      {"nqhd,nkhd->nhqk", "nqhd,nkhd->nhqk", {{2, 5, 3, 4}, {2, 6, 3, 4}}},
      {"iJ,Jk->ki", "iJ,Jk->ki", {{3, 4}, {4, 5}}},
  };
  return cases;
}

TEST_CASE("Einsum equations of real exports run as products, sums and transposes like numpy's einsum", "[cpu_ops][einsum]") {
  std::mt19937 rng(311);
  for (const EinsumCase& c : einsum_cases()) {
    INFO(c.equation);
    std::vector<Floats> values;
    for (const Shape& s : c.shapes) values.push_back(random_floats(rng, count(s)));
    ModelBuilder m(17);
    std::vector<std::string> names;
    std::vector<Floats> feeds;
    for (std::size_t i = 0; i < c.shapes.size(); ++i) {
      names.push_back("x");
      names.back() += std::to_string(i);  // not "x" + ...: GCC 12 warns of a false -Wrestrict there
      if (c.shapes[i][0] != c.shapes[0][0]) {
        m.weights(names.back(), c.shapes[i], values[i]);
      } else {
        m.input(names.back(), c.shapes[i]);
        feeds.push_back(values[i]);
      }
    }
    m.output("y");
    set_string(m.node("Einsum", names, {"y"}, "the_einsum"), "equation", c.equation);
    const Graph g = sluice::nn::prepare(m.load(), c.shapes[0].empty() ? 1 : c.shapes[0][0]);
    CHECK(ops_absent(g, Op::Einsum));
    const Floats want = einsum_reference(c.reference, c.shapes, values);
    const auto got = run_prepared(m, c.shapes[0][0], feeds);
    CHECK(relative_error(got.at(0), want) <= 1e-5);
  }
}

TEST_CASE("Attention written as Einsums (fused into Attention by prepare) computes softmax(q k^T) v",
          "[cpu_ops][einsum]") {
  std::mt19937 rng(313);
  for (const bool maxvit : {false, true}) {
    const Shape qs = maxvit ? Shape{2, 3, 2, 7, 8} : Shape{2, 4, 9, 8};
    const Shape ks = maxvit ? Shape{2, 3, 2, 5, 8} : Shape{2, 4, 11, 8};
    const std::string scores = maxvit ? "B G H I D, B G H J D -> B G H I J" : "bhqd,bhkd->bhqk";
    const std::string output = maxvit ? "B G H I J, B G H J D -> B G H I D" : "bhqk,bhkd->bhqd";
    INFO(scores);
    const Floats q = random_floats(rng, count(qs)), k = random_floats(rng, count(ks));
    const Floats v = random_floats(rng, count(ks));
    Shape ss = qs;
    ss.back() = ks[ks.size() - 2];
    const std::string letters = maxvit ? "BGHID,BGHJD->BGHIJ" : "bhqd,bhkd->bhqk";
    Floats s = einsum_reference(letters, {qs, ks}, {q, k});
    const std::int64_t row = ss.back();
    for (std::size_t r = 0; r < s.size(); r += static_cast<std::size_t>(row)) {  // softmax of each row, in double
      float* x = s.data() + r;
      const double top = *std::max_element(x, x + row);
      double sum = 0;
      for (std::int64_t j = 0; j < row; ++j) sum += std::exp(x[j] - top);
      for (std::int64_t j = 0; j < row; ++j) x[j] = static_cast<float>(std::exp(x[j] - top) / sum);
    }
    const Floats want = einsum_reference(maxvit ? "BGHIJ,BGHJD->BGHID" : "bhqk,bhkd->bhqd", {ss, ks}, {s, v});
    ModelBuilder m(17);
    m.input("q", qs).input("k", ks).input("v", ks).output("y");
    set_string(m.node("Einsum", {"q", "k"}, {"s"}), "equation", scores);
    set_int(m.node("Softmax", {"s"}, {"p"}), "axis", -1);
    set_string(m.node("Einsum", {"p", "v"}, {"y"}), "equation", output);
    CHECK(relative_error(run_prepared(m, 2, {q, k, v}).at(0), want) <= 1e-5);
  }
}

TEST_CASE("Einsum of constants folds at prepare time", "[cpu_ops][einsum]") {
  // RT-DETR's position embedding: an outer product of two constant ranges, then sin and cos of it, added to data.
  ModelBuilder m(17);
  const Floats a{0.f, 1.f, 2.f, 3.f}, b{0.5f, 0.25f, 0.125f};
  m.input("x", {4, 3}).weights("a", {4}, a).weights("b", {3}, b).output("y");
  set_string(m.node("Einsum", {"a", "b"}, {"outer"}), "equation", "i,j->ij");
  m.node("Sin", {"outer"}, {"s"});
  m.node("Add", {"x", "s"}, {"y"});
  const Graph g = sluice::nn::prepare(m.load(), 4);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == Op::Add);
  std::mt19937 rng(312);
  const Floats x = random_floats(rng, 12);
  Floats want;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) want.push_back(x[static_cast<std::size_t>(i * 3 + j)] + std::sin(a[i] * b[j]));
  CHECK(relative_error(run_prepared(m, 4, {x}).at(0), want) <= 1e-6);
}

TEST_CASE("Einsum refuses diagonals and malformed equations naming the node and the equation", "[cpu_ops][einsum]") {
  struct Case {
    std::string equation;
    std::vector<Shape> shapes;
    std::string says;
  };
  const std::vector<Case> cases = {
      {"ii->i", {{3, 3}}, "repeats in input 0 (a diagonal)"},
      {"ij,jk->ik", {{3, 4}}, "names 2 inputs, the node has 1"},
      {"ij->k", {{3, 4}}, "output index k is in no input"},
      {"ij->ii", {{3, 4}}, "output index i repeats"},
      {"ij,kj->ik", {{3, 4}, {3, 6}}, "index j is 4 long in one input and 6 in input 1"},
      {"ijk->i", {{3, 4}}, "has 3 indices for shape [3,4]"},
      {"i.j->i", {{3, 4}}, "not one '...'"},
      {"......->", {{3, 4}}, "not one '...'"},
      {"...ij->ij", {{2, 3, 4}}, "an ellipsis in the inputs needs one in the output"},
      {"ij->i->j", {{3, 4}}, "only as one '->'"},
      {"ij-i", {{3, 4}}, "only as one '->'"},
      {"i$->i", {{3, 4}}, "is not a letter"},
      {"ij->i,j", {{3, 4}}, "only between inputs"},
      {std::string(2000, 'i'), {{3, 4}}, "longer than 1024 characters"},
  };
  for (const Case& c : cases) {
    INFO(c.equation);
    ModelBuilder m(17);
    std::vector<std::string> names;
    for (std::size_t i = 0; i < c.shapes.size(); ++i) {
      names.push_back("x");
      names.back() += std::to_string(i);  // not "x" + ...: GCC 12 warns of a false -Wrestrict there
      m.input(names.back(), c.shapes[i]);
    }
    m.output("y");
    set_string(m.node("Einsum", names, {"y"}, "the_einsum"), "equation", c.equation);
    const std::string e = error_of([&] { sluice::nn::prepare(m.load(), c.shapes[0][0]); });
    CHECK_THAT(e, Contains("'the_einsum' (Einsum)"));
    CHECK_THAT(e, Contains(c.says));
    if (c.equation.size() < 100 && c.says != "is not a letter")  // the equation is named once it is clean
      CHECK_THAT(e, Contains("'" + c.equation + "'"));
  }
}

// ---- GatherElements --------------------------------------------------------------------------------------------

Floats gather_elements_reference(const Floats& data, const Shape& ds, const Ints& indices, const Shape& is,
                                 std::size_t axis) {
  Floats y;
  for (std::int64_t i = 0; i < count(is); ++i) {
    Ints idx = unravel(i, is);
    std::int64_t at = indices[static_cast<std::size_t>(i)];
    if (at < -ds[axis] || at >= ds[axis]) {
      y.push_back(std::nanf(""));
      continue;
    }
    idx[axis] = at < 0 ? at + ds[axis] : at;
    y.push_back(data[static_cast<std::size_t>(ravel(idx, ds))]);
  }
  return y;
}

TEST_CASE("GatherElements picks along the axis by run-time or constant indices, negative ones from the end", "[cpu_ops][gather_elements]") {
  std::mt19937 rng(321);
  for (int trial = 0; trial < 40; ++trial) {
    const int rank = 1 + static_cast<int>(rng() % 4);
    Shape ds, is;
    for (int d = 0; d < rank; ++d) ds.push_back(1 + static_cast<std::int64_t>(rng() % 6));
    const auto axis = static_cast<std::size_t>(rng() % static_cast<unsigned>(rank));
    for (int d = 0; d < rank; ++d) {
      const auto dd = static_cast<std::size_t>(d);
      is.push_back(dd == axis ? 1 + static_cast<std::int64_t>(rng() % 7) : 1 + static_cast<std::int64_t>(rng() % ds[dd]));
    }
    is[0] = ds[0];  // the batch dimension is whole
    const bool constant_indices = trial % 2 == 1;
    INFO("data " << sluice::nn::to_string(ds) << " indices " << sluice::nn::to_string(is) << " axis " << axis
                 << (constant_indices ? " constant" : " run-time"));
    const Floats data = random_floats(rng, count(ds));
    Ints indices;
    for (std::int64_t i = 0; i < count(is); ++i)
      indices.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(2 * ds[axis])) - ds[axis]);
    ModelBuilder m(17);
    m.input("data", ds).output("y");
    if (constant_indices) {
      auto& t = m.initializer("indices");
      t.set_data_type(onnx::TensorProto::INT64);
      for (auto d : is) t.add_dims(d);
      for (auto v : indices) t.add_int64_data(v);
    } else {
      m.input("indices", is);
    }
    set_int(m.node("GatherElements", {"data", "indices"}, {"y"}), "axis",
            trial % 3 == 0 ? static_cast<std::int64_t>(axis) - rank : static_cast<std::int64_t>(axis));
    std::vector<Floats> feeds{data};
    if (!constant_indices) feeds.push_back(Floats(indices.begin(), indices.end()));
    const auto got = run_prepared(m, ds[0], feeds);
    CHECK(relative_error(got.at(0), gather_elements_reference(data, ds, indices, is, axis)) == 0);
  }
}

TEST_CASE("GatherElements gives NaN for a run-time index out of range and refuses a constant one", "[cpu_ops][gather_elements]") {
  const Shape ds{2, 5}, is{2, 3};
  const Floats data{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  {
    ModelBuilder m(17);
    m.input("data", ds).input("indices", is).output("y");
    set_int(m.node("GatherElements", {"data", "indices"}, {"y"}), "axis", 1);
    const Floats indices{4, 5, -6, -5, std::nanf(""), 2.f};
    const Floats want{4, std::nanf(""), std::nanf(""), 5, std::nanf(""), 7};
    const auto got = run_prepared(m, 2, {data, indices}).at(0);
    CHECK(relative_error(got, want) == 0);
  }
  {
    ModelBuilder m2(17);
    m2.input("data", {2, 5}).output("y");
    auto& t = m2.initializer("indices");
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(2);
    t.add_dims(2);
    for (std::int64_t v : {0, 1, 4, -6}) t.add_int64_data(v);
    set_int(m2.node("GatherElements", {"data", "indices"}, {"y"}, "the_gather"), "axis", 1);
    const std::string e = error_of([&] { sluice::nn::prepare(m2.load(), 2); });
    CHECK_THAT(e, Contains("'the_gather' (GatherElements)"));
    CHECK_THAT(e, Contains("index -6 is out of range"));
  }
}

TEST_CASE("GatherElements of constants folds", "[cpu_ops][gather_elements]") {
  ModelBuilder m(17);
  m.input("x", {2, 3}).weights("table", {2, 4}, {0, 10, 20, 30, 40, 50, 60, 70}).output("y");
  auto& t = m.initializer("indices");
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(2);
  t.add_dims(3);
  for (std::int64_t v : {3, 0, -1, 1, 1, 2}) t.add_int64_data(v);
  set_int(m.node("GatherElements", {"table", "indices"}, {"g"}), "axis", 1);
  m.node("Add", {"x", "g"}, {"y"});
  const Graph g = sluice::nn::prepare(m.load(), 2);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op == Op::Add);
  const Floats x{1, 2, 3, 4, 5, 6};
  const Floats want{1 + 30, 2 + 0, 3 + 30, 4 + 50, 5 + 50, 6 + 60};
  CHECK(relative_error(run_prepared(m, 2, {x}).at(0), want) == 0);
}

// ---- GridSample ------------------------------------------------------------------------------------------------

// PyTorch's grid_sample (aten/src/ATen/native/GridSampler.h), written out: coordinates in float as PyTorch
// computes them for float data, the taps summed in double.
float unnormalize(float g, std::int64_t size, bool align) {
  return align ? (g + 1) / 2 * static_cast<float>(size - 1) : ((g + 1) * static_cast<float>(size) - 1) / 2;
}
float reflect(float x, std::int64_t twice_low, std::int64_t twice_high) {
  if (twice_low == twice_high) return 0;
  const float lo = static_cast<float>(twice_low) / 2, span = static_cast<float>(twice_high - twice_low) / 2;
  x = std::fabs(x - lo);
  const float extra = std::fmod(x, span);
  const auto flips = static_cast<std::int64_t>(std::floor(x / span));
  return flips % 2 == 0 ? extra + lo : span - extra + lo;
}
float source_index(float g, std::int64_t size, const std::string& padding, bool align) {
  float x = unnormalize(g, size, align);
  if (padding == "reflection") x = align ? reflect(x, 0, 2 * (size - 1)) : reflect(x, -1, 2 * size - 1);
  if (padding != "zeros") x = std::min(static_cast<float>(size - 1), std::max(x, 0.f));
  return x;
}

Floats grid_sample_reference(const Floats& x, const Shape& xs, const Floats& grid, const Shape& gs,
                             const std::string& mode, const std::string& padding, bool align) {
  const std::int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], Ho = gs[1], Wo = gs[2];
  Floats y;
  for (std::int64_t n = 0; n < N; ++n)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t i = 0; i < Ho; ++i)
        for (std::int64_t j = 0; j < Wo; ++j) {
          const float* g = &grid[static_cast<std::size_t>(((n * Ho + i) * Wo + j) * 2)];
          const float ix = source_index(g[0], W, padding, align), iy = source_index(g[1], H, padding, align);
          auto pixel = [&](std::int64_t r, std::int64_t col) -> double {
            if (r < 0 || r >= H || col < 0 || col >= W) return 0;
            return x[static_cast<std::size_t>(((n * C + c) * H + r) * W + col)];
          };
          if (mode == "nearest") {
            y.push_back(static_cast<float>(pixel(static_cast<std::int64_t>(std::nearbyint(iy)),
                                                 static_cast<std::int64_t>(std::nearbyint(ix)))));
            continue;
          }
          const auto x0 = static_cast<std::int64_t>(std::floor(ix)), y0 = static_cast<std::int64_t>(std::floor(iy));
          const double wx = ix - static_cast<float>(x0), wy = iy - static_cast<float>(y0);
          y.push_back(static_cast<float>(pixel(y0, x0) * (1 - wx) * (1 - wy) + pixel(y0, x0 + 1) * wx * (1 - wy) +
                                         pixel(y0 + 1, x0) * (1 - wx) * wy + pixel(y0 + 1, x0 + 1) * wx * wy));
        }
  return y;
}

TEST_CASE("GridSample matches PyTorch's formulas in every mode, padding and corner alignment", "[cpu_ops][grid_sample]") {
  std::mt19937 rng(331);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 5, 7}, {2, 4, 6, 2}}, {{1, 2, 1, 6}, {1, 3, 3, 2}}, {{2, 1, 8, 8}, {2, 8, 8, 2}}, {{1, 4, 3, 1}, {1, 5, 2, 2}}};
  for (const auto& [xs, gs] : shapes)
    for (const std::string mode : {"bilinear", "nearest"})
      for (const std::string padding : {"zeros", "border", "reflection"})
        for (const std::int64_t align : {0, 1}) {
          INFO(sluice::nn::to_string(xs) << " grid " << sluice::nn::to_string(gs) << " " << mode << " " << padding
                                         << " align_corners " << align);
          const Floats x = random_floats(rng, count(xs));
          const Floats grid = random_floats(rng, count(gs), -1.3f, 1.3f);  // past the edges too
          ModelBuilder m(16);
          m.input("x", xs).input("grid", gs).output("y");
          auto& n = m.node("GridSample", {"x", "grid"}, {"y"});
          set_string(n, "mode", mode);
          set_string(n, "padding_mode", padding);
          set_int(n, "align_corners", align);
          const auto got = run_prepared(m, xs[0], {x, grid});
          CHECK(relative_error(got.at(0), grid_sample_reference(x, xs, grid, gs, mode, padding, align != 0)) <= 1e-6);
        }
}

TEST_CASE("GridSample's defaults are bilinear, zeros and align_corners 0, and a constant grid runs", "[cpu_ops][grid_sample]") {
  std::mt19937 rng(332);
  const Shape xs{2, 3, 4, 5}, gs{2, 3, 3, 2};
  const Floats x = random_floats(rng, count(xs)), grid = random_floats(rng, count(gs), -1.1f, 1.1f);
  ModelBuilder m(16);
  m.input("x", xs).weights("grid", gs, grid).output("y");
  m.node("GridSample", {"x", "grid"}, {"y"});
  CHECK(relative_error(run_prepared(m, 2, {x}).at(0), grid_sample_reference(x, xs, grid, gs, "bilinear", "zeros", false)) <= 1e-6);
}

TEST_CASE("GridSample refuses bicubic and inputs that are not 4-D, naming the node", "[cpu_ops][grid_sample]") {
  {
    ModelBuilder m(16);
    m.input("x", {1, 2, 4, 4}).input("grid", {1, 3, 3, 2}).output("y");
    set_string(m.node("GridSample", {"x", "grid"}, {"y"}, "the_sampler"), "mode", "bicubic");
    const std::string e = error_of([&] { sluice::nn::prepare(m.load(), 1); });
    CHECK_THAT(e, Contains("'the_sampler' (GridSample)"));
    CHECK_THAT(e, Contains("mode 'bicubic' is not supported"));
  }
  {
    ModelBuilder m(16);
    m.input("x", {1, 2, 4}).input("grid", {1, 3, 2}).output("y");
    m.node("GridSample", {"x", "grid"}, {"y"}, "the_sampler");
    CHECK_THAT(error_of([&] { sluice::nn::prepare(m.load(), 1); }), Contains("'the_sampler' (GridSample): needs a 4-D input"));
  }
  {
    ModelBuilder m(16);
    m.input("x", {1, 2, 4, 4}).input("grid", {1, 3, 3, 3}).output("y");
    m.node("GridSample", {"x", "grid"}, {"y"}, "the_sampler");
    CHECK_THAT(error_of([&] { sluice::nn::prepare(m.load(), 1); }), Contains("must be [N, H_out, W_out, 2]"));
  }
}

}  // namespace
