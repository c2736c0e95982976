#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <tuple>

#include "nn/cpu/engine.hpp"
#include "nn/describe.hpp"
#include "nn/memory_plan.hpp"
#include "nn/npy.hpp"
#include "nn/onnx_loader.hpp"
#include "nn/passes.hpp"
#include "runtime/bounded_file.hpp"
#include "tests/nn/model_builder.hpp"

using namespace sluice::nn;
using sluice::nn::test::ModelBuilder;
using sluice::nn::test::error_of;
using Catch::Matchers::Contains;
using Ints = std::vector<std::int64_t>;

namespace {

Graph prepared(const ModelBuilder& m, std::int64_t batch = 1) { return prepare(m.load(), batch); }

std::size_t count_op(const Graph& g, const std::string& op) {
  return static_cast<std::size_t>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return op_name(n.op) == op; }));
}

const Node& only_node(const Graph& g) {
  REQUIRE(g.nodes.size() == 1);
  return g.nodes[0];
}

std::vector<float> random_values(std::size_t count, unsigned seed, float low = -1.f, float high = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// The prepared-form invariants of nn/graph.hpp that hold for any model.
void check_prepared_form(const Graph& g) {
  static const std::set<std::string> ops{"Conv", "ConvTranspose", "BatchNormalization", "Relu", "LeakyRelu", "Clip", "Sigmoid",
                                         "HardSigmoid", "HardSwish", "Tanh", "Add", "Sub", "Mul", "Div", "MaxPool",
                                         "AveragePool", "GlobalAveragePool", "Reshape", "Transpose", "Gemm",
                                         "MatMul", "Concat", "Split", "Slice", "Softmax", "Resize", "Pad",
                                         "Erf", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor", "Ceil",
                                         "Pow", "Max", "Min", "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin",
                                         "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd",
                                         "LayerNormalization", "Gelu", "Attention", "LogSoftmax", "ArgMax", "ArgMin",
                                         "TopK", "Linear", "Sin", "Cos", "GatherElements", "GridSample"};
  std::set<std::string> available;
  for (const auto& in : g.inputs) {
    available.insert(in.name);
    CHECK(std::all_of(in.shape.begin(), in.shape.end(), [](auto d) { return d >= 0; }));
  }
  for (const auto& n : g.nodes) {
    INFO(n.where());
    CHECK(ops.count(op_name(n.op)));
    bool any_runtime_input = false;
    for (const auto& in : n.inputs) {
      if (in.empty()) continue;
      const bool constant = g.is_constant(in);
      any_runtime_input = any_runtime_input || !constant;
      CHECK((constant || available.count(in)));  // topological order
      if (constant) CHECK(g.constants.at(in).type == ElementType::f32);
    }
    CHECK(any_runtime_input);
    for (const auto& out : n.outputs) {
      available.insert(out);
      REQUIRE(g.shapes.count(out));
      CHECK(std::all_of(g.shapes.at(out).begin(), g.shapes.at(out).end(), [](auto d) { return d >= 0; }));
    }
    if (n.op == Op::Conv) {
      CHECK(n.inputs.size() == 4);
      CHECK(g.is_constant(n.inputs[1]));
      CHECK(n.attrs.ints("pads").size() == 4);
      CHECK_FALSE(n.attrs.has("auto_pad"));
    }
    if (n.op == Op::ConvTranspose) {
      CHECK(n.inputs.size() == 3);
      CHECK(g.is_constant(n.inputs[1]));
      CHECK(n.attrs.ints("pads").size() == 4);
      CHECK(n.attrs.ints("output_padding").size() == 2);
      CHECK_FALSE(n.attrs.has("auto_pad"));
      CHECK_FALSE(n.attrs.has("output_shape"));
    }
  }
  for (const auto& out : g.outputs) CHECK(available.count(out.name));
}

// Direct convolution (NCHW, OIHW, symmetric stride/pad, group 1): the reference for folding checks.
std::vector<float> reference_conv(const std::vector<float>& x, const Shape& xs, const std::vector<float>& w,
                                  const Shape& ws, const std::vector<float>& b, std::int64_t pad) {
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], m = ws[0], kh = ws[2], kw = ws[3];
  const std::int64_t oh = h + 2 * pad - kh + 1, ow = wd + 2 * pad - kw + 1;
  std::vector<float> y(static_cast<std::size_t>(n * m * oh * ow));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t o = 0; o < m; ++o)
      for (std::int64_t r = 0; r < oh; ++r)
        for (std::int64_t q = 0; q < ow; ++q) {
          double sum = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)];
          for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t u = 0; u < kh; ++u)
              for (std::int64_t v = 0; v < kw; ++v) {
                const std::int64_t yy = r + u - pad, xx = q + v - pad;
                if (yy < 0 || yy >= h || xx < 0 || xx >= wd) continue;
                sum += static_cast<double>(x[static_cast<std::size_t>(((i * c + ch) * h + yy) * wd + xx)]) *
                       w[static_cast<std::size_t>(((o * c + ch) * kh + u) * kw + v)];
              }
          y[static_cast<std::size_t>(((i * m + o) * oh + r) * ow + q)] = static_cast<float>(sum);
        }
  return y;
}

}  // namespace

// ---- batch binding ------------------------------------------------------------------------------------------

TEST_CASE("prepare binds the symbolic batch and refuses other symbolic dimensions", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 3, 8, 8}).output("y");
  m.node("Relu", {"x"}, {"y"});
  const Graph g = prepared(m, 5);
  CHECK(g.inputs[0].shape == Shape{5, 3, 8, 8});
  CHECK(g.outputs[0].shape == Shape{5, 3, 8, 8});
  CHECK(g.shapes.at("y") == Shape{5, 3, 8, 8});

  ModelBuilder symbolic;
  symbolic.input("image", {-1, 3, -1, 8}).output("y");
  symbolic.node("Relu", {"image"}, {"y"});
  const std::string e = error_of([&] { prepared(symbolic, 2); });
  CHECK_THAT(e, Contains("graph input 'image'"));
  CHECK_THAT(e, Contains("symbolic dimension 2"));

  ModelBuilder fixed;
  fixed.input("x", {1, 3}).output("y");
  fixed.node("Relu", {"x"}, {"y"});
  CHECK(prepared(fixed, 1).inputs[0].shape == Shape{1, 3});
  CHECK_THAT(error_of([&] { prepared(fixed, 4); }), Contains("fixed batch of 1"));
}

// ---- canonicalization ---------------------------------------------------------------------------------------

TEST_CASE("Flatten Squeeze Unsqueeze and Reshape become Reshape with a concrete shape", "[nn][passes]") {
  SECTION("Flatten") {
    ModelBuilder m;
    m.input("x", {-1, 4, 3, 2}).output("y");
    test::set_int(m.node("Flatten", {"x"}, {"y"}), "axis", -2);
    const Graph g = prepared(m, 2);
    const Node& n = only_node(g);
    CHECK(n.op == Op::Reshape);
    CHECK(n.inputs == std::vector<std::string>{"x"});
    CHECK(n.attrs.ints("shape") == Ints{8, 6});
  }
  SECTION("Squeeze with axes as an attribute (opset 11) and as an input (opset 13)") {
    ModelBuilder m11(11);
    m11.input("x", {-1, 1, 5, 1}).output("y");
    test::set_ints(m11.node("Squeeze", {"x"}, {"y"}), "axes", {-1});
    CHECK(only_node(prepared(m11, 3)).attrs.ints("shape") == Ints{3, 1, 5});
    ModelBuilder m13(13);
    m13.input("x", {-1, 1, 5, 1}).output("y").ints("axes", {1});
    m13.node("Squeeze", {"x", "axes"}, {"y"});
    CHECK(only_node(prepared(m13, 3)).attrs.ints("shape") == Ints{3, 5, 1});
    ModelBuilder all(13);
    all.input("x", {-1, 1, 5, 1}).output("y");
    all.node("Squeeze", {"x"}, {"y"});
    CHECK(only_node(prepared(all, 3)).attrs.ints("shape") == Ints{3, 5});
    ModelBuilder bad(13);
    bad.input("x", {-1, 2, 5}).output("y").ints("axes", {1});
    bad.node("Squeeze", {"x", "axes"}, {"y"}, "sq");
    CHECK_THAT(error_of([&] { prepared(bad, 1); }), Contains("node 'sq' (Squeeze)"));
  }
  SECTION("Unsqueeze with negative axes") {
    ModelBuilder m;
    m.input("x", {-1, 5}).output("y").ints("axes", {-1, 1});
    m.node("Unsqueeze", {"x", "axes"}, {"y"});
    CHECK(only_node(prepared(m, 2)).attrs.ints("shape") == Ints{2, 1, 5, 1});
  }
  SECTION("Reshape with 0 and -1") {
    ModelBuilder m;
    m.input("x", {-1, 4, 6}).output("y").ints("shape", {0, -1, 3});
    m.node("Reshape", {"x", "shape"}, {"y"});
    const Graph g = prepared(m, 2);
    CHECK(only_node(g).attrs.ints("shape") == Ints{2, 8, 3});
    CHECK(g.outputs[0].shape == Shape{2, 8, 3});
  }
  SECTION("Reshape to a shape of another element count is refused") {
    ModelBuilder m;
    m.input("x", {-1, 4, 6}).output("y").ints("shape", {5, 5});
    m.node("Reshape", {"x", "shape"}, {"y"}, "bad_reshape");
    const std::string e = error_of([&] { prepared(m, 1); });
    CHECK_THAT(e, Contains("node 'bad_reshape' (Reshape)"));
    CHECK_THAT(e, Contains("[1,4,6]"));
  }
}

TEST_CASE("Clip bounds from inputs become min and max attributes", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {1, 4}).output("y").output("z").weights("lo", {}, {-1.5f}).weights("hi", {}, {6.f});
  m.node("Clip", {"x", "lo", "hi"}, {"y"});
  m.node("Clip", {"x", "", "hi"}, {"z"});
  const Graph g = prepared(m);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].inputs == std::vector<std::string>{"x"});
  CHECK(g.nodes[0].attrs.f("min", 0.f) == -1.5f);
  CHECK(g.nodes[0].attrs.f("max", 0.f) == 6.f);
  CHECK(g.nodes[1].attrs.f("min", 0.f) == -std::numeric_limits<float>::infinity());
  CHECK(g.nodes[1].attrs.f("max", 0.f) == 6.f);
}

TEST_CASE("Slice inputs become clamped per-dimension attributes", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 10, 8}).output("y");
  m.ints("starts", {-3, 100}).ints("ends", {std::numeric_limits<std::int64_t>::max(), -100}).ints("axes", {1, -1});
  m.ints("steps", {1, -2});
  m.node("Slice", {"x", "starts", "ends", "axes", "steps"}, {"y"});
  const Graph g = prepared(m, 2);
  const Node& n = only_node(g);
  CHECK(n.inputs.size() == 1);
  CHECK(n.attrs.ints("starts") == Ints{0, 7, 7});
  CHECK(n.attrs.ints("ends") == Ints{2, 10, -1});
  CHECK(n.attrs.ints("steps") == Ints{1, 1, -2});
  CHECK(g.shapes.at("y") == Shape{2, 3, 4});  // rows 7..9, columns 7,5,3,1
}

TEST_CASE("Split sizes come from the input the attribute or equal parts", "[nn][passes]") {
  ModelBuilder m13(13);
  m13.input("x", {-1, 6}).output("a").output("b").ints("sizes", {2, 4});
  test::set_int(m13.node("Split", {"x", "sizes"}, {"a", "b"}), "axis", -1);
  const Graph g = prepared(m13, 3);
  CHECK(only_node(g).attrs.ints("split") == Ints{2, 4});
  CHECK(only_node(g).attrs.i("axis", -7) == 1);
  CHECK(g.shapes.at("b") == Shape{3, 4});

  ModelBuilder m11(11);
  m11.input("x", {-1, 6}).output("a").output("b");
  auto& s = m11.node("Split", {"x"}, {"a", "b"});
  test::set_int(s, "axis", 1);
  test::set_ints(s, "split", {5, 1});
  CHECK(only_node(prepared(m11, 1)).attrs.ints("split") == Ints{5, 1});

  ModelBuilder equal(13);
  equal.input("x", {-1, 6}).output("a").output("b").output("c");
  test::set_int(equal.node("Split", {"x"}, {"a", "b", "c"}), "axis", 1);
  CHECK(only_node(prepared(equal, 1)).attrs.ints("split") == Ints{2, 2, 2});
}

TEST_CASE("Pad inputs become pads mode and value attributes", "[nn][passes]") {
  auto pad_model = [](const std::string& mode) {
    ModelBuilder m;
    m.input("x", {-1, 2, 3, 3}).output("y").ints("pads", {0, 0, 1, 2, 0, 0, 3, 4}).weights("v", {}, {0.5f});
    test::set_string(m.node("Pad", {"x", "pads", "v"}, {"y"}, "pad"), "mode", mode);
    return m;
  };
  const Graph g = prepared(pad_model("edge"), 1);
  const Node& n = only_node(g);
  CHECK(n.inputs.size() == 1);
  CHECK(n.attrs.ints("pads") == Ints{0, 0, 1, 2, 0, 0, 3, 4});
  CHECK(n.attrs.s("mode", "") == "edge");
  CHECK(n.attrs.f("value", 0.f) == 0.5f);
  CHECK(g.shapes.at("y") == Shape{1, 2, 7, 9});
  // Reflecting 3 or 4 rows of a 3-row input is not defined.
  CHECK_THAT(error_of([&] { prepared(pad_model("reflect"), 1); }), Contains("node 'pad' (Pad): reflect padding"));
}

TEST_CASE("Resize scales and sizes become concrete sizes and Upsample becomes Resize", "[nn][passes]") {
  ModelBuilder scales;
  scales.input("x", {-1, 3, 5, 4}).output("y").weights("roi", {0}, {}).weights("scales", {4}, {1.f, 1.f, 2.f, 1.5f});
  auto& r = scales.node("Resize", {"x", "roi", "scales"}, {"y"});
  test::set_string(r, "mode", "linear");
  test::set_string(r, "coordinate_transformation_mode", "align_corners");
  const Graph g = prepared(scales, 2);
  const Node& n = only_node(g);
  CHECK(n.inputs.size() == 1);
  CHECK(n.attrs.ints("sizes") == Ints{2, 3, 10, 6});
  CHECK(n.attrs.floats("scales") == std::vector<float>{1.f, 1.f, 2.f, 1.5f});
  CHECK(n.attrs.s("mode", "") == "linear");
  CHECK(n.attrs.s("coordinate_transformation_mode", "") == "align_corners");
  CHECK(n.attrs.s("nearest_mode", "") == "round_prefer_floor");

  ModelBuilder sizes;
  sizes.input("x", {-1, 3, 5, 4}).output("y").ints("sizes", {1, 3, 7, 9});
  sizes.node("Resize", {"x", "", "", "sizes"}, {"y"});
  CHECK(only_node(prepared(sizes, 1)).attrs.ints("sizes") == Ints{1, 3, 7, 9});
  CHECK_FALSE(only_node(prepared(sizes, 1)).attrs.has("scales"));

  ModelBuilder channels;
  channels.input("x", {-1, 3, 5, 4}).output("y").weights("scales", {4}, {1.f, 2.f, 1.f, 1.f});
  channels.node("Resize", {"x", "", "scales"}, {"y"});
  CHECK_THAT(error_of([&] { prepared(channels, 1); }), Contains("only H and W may be resized"));

  ModelBuilder upsample(11);
  upsample.input("x", {-1, 3, 5, 4}).output("y").weights("scales", {4}, {1.f, 1.f, 2.f, 2.f});
  upsample.node("Upsample", {"x", "scales"}, {"y"});
  const Graph u = prepared(upsample, 1);
  const Node& un = only_node(u);
  CHECK(un.op == Op::Resize);
  CHECK(un.attrs.ints("sizes") == Ints{1, 3, 10, 8});
  CHECK(un.attrs.floats("scales") == std::vector<float>{1.f, 1.f, 2.f, 2.f});
  CHECK(un.attrs.s("coordinate_transformation_mode", "") == "asymmetric");
  CHECK(un.attrs.s("nearest_mode", "") == "floor");
  CHECK(std::any_of(u.rewrites.begin(), u.rewrites.end(), [](const std::string& r) { return r.find("Upsample") != std::string::npos; }));
}

TEST_CASE("Softmax gets an axis and coerce_2d by opset", "[nn][passes]") {
  auto softmax = [](std::int64_t opset, Shape dims) {
    ModelBuilder m(opset);
    m.input("x", dims).output("y");
    m.node("Softmax", {"x"}, {"y"});
    return prepared(m, dims[0]).nodes.at(0);
  };
  const Node legacy = softmax(11, {2, 3, 4});
  CHECK(legacy.attrs.i("axis", -1) == 1);
  CHECK(legacy.attrs.i("coerce_2d", -1) == 1);
  const Node legacy_last = softmax(11, {2, 3});
  CHECK(legacy_last.attrs.i("axis", -1) == 1);
  CHECK(legacy_last.attrs.i("coerce_2d", -1) == 0);  // same meaning either way
  const Node modern = softmax(13, {2, 3, 4});
  CHECK(modern.attrs.i("axis", -1) == 2);
  CHECK(modern.attrs.i("coerce_2d", -1) == 0);
}

TEST_CASE("auto_pad becomes explicit pads", "[nn][passes]") {
  auto pads_for = [](const std::string& auto_pad, std::int64_t size) {
    ModelBuilder m;
    m.input("x", {1, 1, size, size}).output("y").weights("w", {1, 1, 3, 3}, std::vector<float>(9, 1.f));
    auto& c = m.node("Conv", {"x", "w"}, {"y"});
    test::set_string(c, "auto_pad", auto_pad);
    test::set_ints(c, "strides", {2, 2});
    const Graph g = prepared(m);
    return std::make_pair(g.nodes.at(0).attrs.ints("pads"), g.shapes.at("y"));
  };
  // Output ceil(size / 2); total padding (out - 1) * 2 + 3 - size, the odd pixel at the end (UPPER) or start (LOWER).
  CHECK(pads_for("SAME_UPPER", 7) == std::make_pair(Ints{1, 1, 1, 1}, Shape{1, 1, 4, 4}));
  CHECK(pads_for("SAME_UPPER", 8) == std::make_pair(Ints{0, 0, 1, 1}, Shape{1, 1, 4, 4}));
  CHECK(pads_for("SAME_LOWER", 8) == std::make_pair(Ints{1, 1, 0, 0}, Shape{1, 1, 4, 4}));
  CHECK(pads_for("VALID", 8) == std::make_pair(Ints{0, 0, 0, 0}, Shape{1, 1, 3, 3}));
}

// ConvTranspose: out = stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - pads; output_shape and
// auto_pad give the pads by the spec (total = full - wanted; SAME_UPPER puts the odd pixel at the end, the others
// at the start) and a wanted size beyond the full span becomes output_padding.
TEST_CASE("ConvTranspose gets explicit pads and output_padding from every spelling", "[nn][passes]") {
  struct Spelling {
    std::string auto_pad;
    Ints pads, output_padding, output_shape;
    std::int64_t kernel;
  };
  auto prepare_one = [](const Spelling& s) {
    ModelBuilder m;
    m.input("x", {-1, 4, 5, 5}).output("y");
    const std::int64_t k = s.kernel;
    m.weights("w", {4, 3, k, k}, std::vector<float>(static_cast<std::size_t>(12 * k * k), 0.5f))
        .weights("b", {6}, std::vector<float>(6, 0.f));
    auto& c = m.node("ConvTranspose", {"x", "w", "b"}, {"y"});
    test::set_ints(c, "strides", {2, 2});
    test::set_int(c, "group", 2);
    if (!s.auto_pad.empty()) test::set_string(c, "auto_pad", s.auto_pad);
    if (!s.pads.empty()) test::set_ints(c, "pads", s.pads);
    if (!s.output_padding.empty()) test::set_ints(c, "output_padding", s.output_padding);
    if (!s.output_shape.empty()) test::set_ints(c, "output_shape", s.output_shape);
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    const Node& n = only_node(g);
    CHECK(n.op == Op::ConvTranspose);
    CHECK(n.attrs.i("group", 0) == 2);
    CHECK(n.attrs.ints("strides") == Ints{2, 2});
    CHECK(n.attrs.ints("dilations") == Ints{1, 1});
    return std::make_tuple(n.attrs.ints("pads"), n.attrs.ints("output_padding"), g.shapes.at("y"));
  };
  // Full span: 2 * 4 + 3 = 11 pixels with a 3x3 kernel; 9 with 1x1. Channels: 3 per group x 2 groups.
  CHECK(prepare_one({"", {}, {}, {}, 3}) == std::make_tuple(Ints{0, 0, 0, 0}, Ints{0, 0}, Shape{2, 6, 11, 11}));
  CHECK(prepare_one({"", {1, 0, 1, 2}, {1, 0}, {}, 3}) ==
        std::make_tuple(Ints{1, 0, 1, 2}, Ints{1, 0}, Shape{2, 6, 10, 9}));
  CHECK(prepare_one({"", {5, 5, 5, 5}, {}, {10, 9}, 3}) ==  // pads are ignored when output_shape is given
        std::make_tuple(Ints{1, 1, 0, 1}, Ints{0, 0}, Shape{2, 6, 10, 9}));
  CHECK(prepare_one({"", {}, {}, {2, 6, 10, 9}, 3}) ==  // N and C may be given too
        std::make_tuple(Ints{1, 1, 0, 1}, Ints{0, 0}, Shape{2, 6, 10, 9}));
  CHECK(prepare_one({"SAME_UPPER", {}, {}, {}, 3}) == std::make_tuple(Ints{0, 0, 1, 1}, Ints{0, 0}, Shape{2, 6, 10, 10}));
  CHECK(prepare_one({"SAME_LOWER", {}, {}, {}, 3}) == std::make_tuple(Ints{1, 1, 0, 0}, Ints{0, 0}, Shape{2, 6, 10, 10}));
  CHECK(prepare_one({"SAME_UPPER", {}, {}, {}, 1}) == std::make_tuple(Ints{0, 0, 0, 0}, Ints{1, 1}, Shape{2, 6, 10, 10}));
  CHECK(prepare_one({"VALID", {1, 1, 1, 1}, {}, {}, 3}) == std::make_tuple(Ints{0, 0, 0, 0}, Ints{0, 0}, Shape{2, 6, 11, 11}));
}

TEST_CASE("ConvTranspose outside what the backends run is refused naming the node", "[nn][passes]") {
  auto error_for = [](const std::function<void(ModelBuilder&, onnx::NodeProto&)>& change, Shape x = {1, 4, 5, 5}) {
    ModelBuilder m;
    m.input("x", x).output("y").weights("w", {4, 2, 3, 3}, std::vector<float>(72, 0.5f));
    auto& c = m.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
    test::set_ints(c, "strides", {2, 2});
    change(m, c);
    return error_of([&] { prepared(m); });
  };
  auto no_change = [](ModelBuilder&, onnx::NodeProto&) {};
  CHECK(error_for(no_change) == "(no error)");
  std::string e = error_for([](ModelBuilder&, onnx::NodeProto& c) { test::set_ints(c, "output_padding", {2, 0}); });
  CHECK_THAT(e, Contains("node 'up' (ConvTranspose)"));
  CHECK_THAT(e, Contains("output_padding"));
  e = error_for([](ModelBuilder&, onnx::NodeProto& c) { test::set_ints(c, "pads", {3, 3, 3, 3}); }, {1, 4, 2, 2});
  CHECK_THAT(e, Contains("node 'up' (ConvTranspose)"));
  CHECK_THAT(e, Contains("crop away the whole output"));
  e = error_for(no_change, {1, 3, 5, 5});  // W's C_in is 4
  CHECK_THAT(e, Contains("node 'up' (ConvTranspose)"));
  CHECK_THAT(e, Contains("does not fit"));
  e = error_for(no_change, {1, 4, 5});
  CHECK_THAT(e, Contains("node 'up' (ConvTranspose)"));
  CHECK_THAT(e, Contains("2-D"));
  e = error_for([](ModelBuilder&, onnx::NodeProto& c) { test::set_string(c, "auto_pad", "SAME"); });
  CHECK_THAT(e, Contains("auto_pad 'SAME'"));

  ModelBuilder runtime_weights;  // W computed at run time
  runtime_weights.input("x", {4, 4, 5, 5}).input("w", {4, 2, 3, 3}).output("y");
  runtime_weights.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
  CHECK_THAT(error_of([&] { prepared(runtime_weights, 4); }), Contains("must be a constant"));

  ModelBuilder constant_input;  // all inputs constant: folding ConvTranspose is not supported, like Conv
  constant_input.input("z", {1, 2, 7, 7}).output("s")
      .weights("x", {1, 4, 5, 5}, std::vector<float>(100, 1.f))
      .weights("w", {4, 2, 3, 3}, std::vector<float>(72, 0.5f));
  constant_input.node("ConvTranspose", {"x", "w"}, {"y"}, "up");
  constant_input.node("Add", {"z", "y"}, {"s"});
  e = error_of([&] { prepared(constant_input); });
  CHECK_THAT(e, Contains("node 'up' (ConvTranspose)"));
  CHECK_THAT(e, Contains("folding ConvTranspose at prepare time is not supported"));
}

TEST_CASE("negative axes are normalized and Transpose gets its default perm", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 2, 3}).output("y").output("t");
  test::set_int(m.node("Concat", {"x", "x"}, {"y"}), "axis", -1);
  m.node("Transpose", {"x"}, {"t"});
  const Graph g = prepared(m, 4);
  CHECK(g.nodes.at(0).attrs.i("axis", -1) == 2);
  CHECK(g.shapes.at("y") == Shape{4, 2, 6});
  CHECK(g.nodes.at(1).attrs.ints("perm") == Ints{2, 1, 0});
  CHECK(g.shapes.at("t") == Shape{3, 2, 4});
}

TEST_CASE("a Transpose that moves only dims of length 1 becomes a Reshape computing the same values", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {1, 3, 1, 4}).output("moved_ones").output("moved_data");
  test::set_ints(m.node("Transpose", {"x"}, {"moved_ones"}), "perm", {1, 2, 0, 3});  // [3, 1, 1, 4]
  test::set_ints(m.node("Transpose", {"x"}, {"moved_data"}), "perm", {2, 3, 1, 0});  // [1, 4, 3, 1]
  const Graph g = prepared(m);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op == Op::Reshape);
  CHECK(g.nodes[0].attrs.ints("shape") == Ints{3, 1, 1, 4});
  CHECK(g.nodes[1].op == Op::Transpose);
  const auto x = random_values(12, 95);
  std::vector<float> ones(12), data(12);
  CpuEngine(g).run({x.data()}, {ones.data(), data.data()});
  CHECK(ones == x);
  for (std::size_t c = 0; c < 3; ++c)
    for (std::size_t w = 0; w < 4; ++w) CHECK(data[w * 3 + c] == x[c * 4 + w]);
}

// ---- shape inference ----------------------------------------------------------------------------------------

TEST_CASE("shape inference follows the ONNX formulas", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 4, 11, 9}).output("conv").output("max").output("avg").output("gap").output("gemm")
      .output("mm").output("mv").output("add");
  // Conv: out = floor((in + pads - dilation * (k - 1) - 1) / stride) + 1, channels from W, group 2.
  m.weights("w", {6, 2, 3, 3}, std::vector<float>(108, 0.1f)).weights("b", {6}, std::vector<float>(6, 0.f));
  auto& c = m.node("Conv", {"x", "w", "b"}, {"conv"});
  test::set_ints(c, "strides", {2, 1});
  test::set_ints(c, "pads", {1, 0, 1, 0});
  test::set_ints(c, "dilations", {1, 2});
  test::set_int(c, "group", 2);
  auto& mp = m.node("MaxPool", {"x"}, {"max"});
  test::set_ints(mp, "kernel_shape", {3, 3});
  test::set_ints(mp, "strides", {2, 2});
  test::set_int(mp, "ceil_mode", 1);
  auto& ap = m.node("AveragePool", {"x"}, {"avg"});
  test::set_ints(ap, "kernel_shape", {2, 2});
  test::set_ints(ap, "strides", {2, 2});
  m.node("GlobalAveragePool", {"x"}, {"gap"});
  m.node("Flatten", {"gap"}, {"flat"});
  m.weights("fc", {10, 4}, std::vector<float>(40, 0.f));
  test::set_int(m.node("Gemm", {"flat", "fc"}, {"gemm"}), "transB", 1);
  m.weights("mat", {9, 5}, std::vector<float>(45, 0.f)).weights("vec", {9}, std::vector<float>(9, 0.f));
  m.node("MatMul", {"x", "mat"}, {"mm"});
  m.node("MatMul", {"x", "vec"}, {"mv"});
  m.weights("row", {1, 1, 9}, std::vector<float>(9, 0.f));
  m.node("Add", {"x", "row"}, {"add"});
  const Graph g = prepared(m, 3);
  CHECK(g.shapes.at("conv") == Shape{3, 6, 6, 5});  // H (11+2-2-1)/2+1 = 6, W (9-4-1)/1+1 = 5
  CHECK(g.shapes.at("max") == Shape{3, 4, 5, 4});   // ceil((11-3)/2)+1 = 5, ceil((9-3)/2)+1 = 4
  CHECK(g.shapes.at("avg") == Shape{3, 4, 5, 4});   // floor
  CHECK(g.shapes.at("gap") == Shape{3, 4, 1, 1});
  CHECK(g.shapes.at("gemm") == Shape{3, 10});
  CHECK(g.shapes.at("mm") == Shape{3, 4, 11, 5});
  CHECK(g.shapes.at("mv") == Shape{3, 4, 11});
  CHECK(g.shapes.at("add") == Shape{3, 4, 11, 9});
  check_prepared_form(g);
}

TEST_CASE("shape inference refuses inconsistent shapes naming the node", "[nn][passes]") {
  ModelBuilder conv;
  conv.input("x", {1, 3, 8, 8}).output("y").weights("w", {4, 2, 1, 1}, std::vector<float>(8, 0.f));
  conv.node("Conv", {"x", "w"}, {"y"}, "c1");
  std::string e = error_of([&] { prepared(conv); });
  CHECK_THAT(e, Contains("node 'c1' (Conv)"));
  CHECK_THAT(e, Contains("[1,3,8,8]"));

  ModelBuilder add;
  add.input("x", {1, 3}).input("z", {1, 4}).output("y");
  add.node("Add", {"x", "z"}, {"y"}, "a1");
  e = error_of([&] { prepared(add); });
  CHECK_THAT(e, Contains("node 'a1' (Add)"));
  CHECK_THAT(e, Contains("do not broadcast"));

  ModelBuilder gemm;
  gemm.input("x", {1, 3}).output("y").weights("w", {4, 5}, std::vector<float>(20, 0.f));
  gemm.node("Gemm", {"x", "w"}, {"y"}, "g1");
  CHECK_THAT(error_of([&] { prepared(gemm); }), Contains("node 'g1' (Gemm)"));
}

// ---- constant folding ---------------------------------------------------------------------------------------

TEST_CASE("exporter shape chains fold into constants and Reshape gets a concrete shape", "[nn][passes]") {
  // x.view(x.size(0), -1) as exporters write it: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
  ModelBuilder m;
  m.input("x", {-1, 3, 4, 4}).output("y");
  m.weights("zero", {}, {0.f});
  auto& index = m.initializer("index");
  index.set_data_type(onnx::TensorProto::INT64);
  index.add_int64_data(0);
  m.ints("minus_one", {-1}).ints("unsqueeze_axes", {0});
  m.node("Shape", {"x"}, {"shape"});
  test::set_int(m.node("Gather", {"shape", "index"}, {"batch"}), "axis", 0);
  m.node("Unsqueeze", {"batch", "unsqueeze_axes"}, {"batch_1d"});
  test::set_int(m.node("Concat", {"batch_1d", "minus_one"}, {"target"}), "axis", 0);
  m.node("Reshape", {"x", "target"}, {"flat"});
  // ... and a Cast / ConstantOfShape chain that only feeds constants.
  test::set_int(m.node("Cast", {"target"}, {"target_f"}), "to", 1);
  auto& fill = m.node("ConstantOfShape", {"unsqueeze_axes_size"}, {"ones_i"});
  m.ints("unsqueeze_axes_size", {1});
  auto* value = fill.add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(1);
  test::set_int(m.node("Cast", {"ones_i"}, {"ones"}), "to", 1);
  m.node("Mul", {"flat", "ones"}, {"y"});
  const Graph g = prepared(m, 6);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op == Op::Reshape);
  CHECK(g.nodes[0].attrs.ints("shape") == Ints{6, 48});
  CHECK(g.nodes[1].op == Op::Mul);
  CHECK(g.constants.at("ones").type == ElementType::f32);
  CHECK(g.constants.at("ones").f32 == std::vector<float>{1.f});
  CHECK(std::count_if(g.rewrites.begin(), g.rewrites.end(),
                      [](const std::string& r) { return r.rfind("folded", 0) == 0; }) >= 6);
}

TEST_CASE("constant weight transforms fold to the values computed by hand", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 3}).output("y");
  const std::vector<float> w = {1, 2, 3, 4, 5, 6};  // [2,3]
  m.weights("w", {2, 3}, w).weights("scale", {1}, {0.5f}).weights("shift", {3}, {1.f, 0.f, -1.f});
  m.node("Transpose", {"w"}, {"wt"});                      // [3,2]
  m.node("Mul", {"wt", "scale"}, {"wt_half"});
  m.node("MatMul", {"shift", "wt"}, {"projected"});        // [3] x [3,2] -> [2]
  m.node("MatMul", {"x", "wt_half"}, {"xw"});
  m.node("Add", {"xw", "projected"}, {"y"});
  const Graph g = prepared(m, 2);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 1);  // x W + projected: one Linear with the folded constants as W and bias
  REQUIRE(g.nodes[0].op == Op::Linear);
  const Tensor& half = g.constants.at(g.nodes[0].inputs[1]);
  CHECK(half.shape == Shape{3, 2});
  CHECK(half.f32 == std::vector<float>{0.5f, 2.f, 1.f, 2.5f, 1.5f, 3.f});
  const Tensor& projected = g.constants.at(g.nodes[0].inputs[2]);
  CHECK(projected.shape == Shape{2});
  CHECK(projected.f32 == std::vector<float>{1 * 1 - 3, 4 * 1 - 6});
}

TEST_CASE("Gather of run-time data becomes Slice (and Reshape for one index) and other indices are refused", "[nn][passes]") {
  {
    ModelBuilder m;  // x[:, 2] (a scalar index drops the axis)
    m.input("x", {-1, 4, 5}).output("y");
    auto& idx = m.initializer("idx");
    idx.set_data_type(onnx::TensorProto::INT64);
    idx.add_int64_data(-2);
    m.node("Gather", {"x", "idx"}, {"y"}, "pick").add_attribute()->CopyFrom([] {
      onnx::AttributeProto a;
      a.set_name("axis");
      a.set_type(onnx::AttributeProto::INT);
      a.set_i(1);
      return a;
    }());
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    REQUIRE(g.nodes.size() == 2);
    CHECK(g.nodes[0].op == Op::Slice);
    CHECK(g.nodes[0].attrs.ints("starts") == Ints{0, 2, 0});
    CHECK(g.nodes[0].attrs.ints("ends") == Ints{2, 3, 5});
    CHECK(g.nodes[1].op == Op::Reshape);
    CHECK(g.shapes.at("y") == Shape{2, 5});
  }
  {
    ModelBuilder m;  // a contiguous range keeps the axis: a Slice alone
    m.input("x", {-1, 6}).output("y").ints("idx", {1, 2, 3});
    auto* axis = m.node("Gather", {"x", "idx"}, {"y"}).add_attribute();
    axis->set_name("axis");
    axis->set_type(onnx::AttributeProto::INT);
    axis->set_i(1);
    const Graph g = prepared(m, 1);
    CHECK(only_node(g).op == Op::Slice);
    CHECK(g.shapes.at("y") == Shape{1, 3});
  }
  ModelBuilder m;
  m.input("x", {-1, 3}).output("y").ints("idx", {2, 0});
  m.node("Gather", {"x", "idx"}, {"y"}, "gather_rows");
  const std::string e = error_of([&] { prepared(m, 3); });
  CHECK_THAT(e, Contains("node 'gather_rows' (Gather)"));
  CHECK_THAT(e, Contains("one index or a contiguous ascending range, not [2,0]"));
}

TEST_CASE("Reductions get sorted non-negative axes from the attribute or the input", "[nn][passes]") {
  ModelBuilder m(13);
  m.input("x", {-1, 3, 4, 5}).output("y").output("z").output("w").ints("axes", {-1, 1});
  auto& mean = m.node("ReduceMean", {"x"}, {"y"});
  auto* axes = mean.add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(3);
  axes->add_ints(-2);
  auto* keep = mean.add_attribute();
  keep->set_name("keepdims");
  keep->set_type(onnx::AttributeProto::INT);
  keep->set_i(0);
  m.node("ReduceSum", {"x", "axes"}, {"z"});  // opset 13: ReduceSum takes axes as an input
  m.node("ReduceMax", {"x"}, {"w"});          // no axes: all of them
  const Graph g = prepared(m, 2);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 3);
  CHECK(g.nodes[0].attrs.ints("axes") == Ints{2, 3});
  CHECK(g.shapes.at("y") == Shape{2, 3});
  CHECK(g.nodes[1].attrs.ints("axes") == Ints{1, 3});
  CHECK(g.shapes.at("z") == Shape{2, 1, 4, 1});
  CHECK(g.nodes[2].attrs.ints("axes") == Ints{0, 1, 2, 3});
  CHECK(g.shapes.at("w") == Shape{1, 1, 1, 1});
}

TEST_CASE("Comparisons Where Expand Range and Mod fold on constants and are refused on run-time data", "[nn][passes]") {
  {
    ModelBuilder m;  // where(range(0, 4) < 2, 1, -1) * x: folded to a constant multiplier
    m.input("x", {-1, 4}).output("y").ints("start", {0}).ints("limit", {4}).ints("delta", {1}).ints("half", {2});
    m.weights("one", {}, {1.f}).weights("minus_one", {}, {-1.f});
    m.node("Range", {"start", "limit", "delta"}, {"r"});
    m.node("Less", {"r", "half"}, {"c"});
    m.node("Where", {"c", "one", "minus_one"}, {"s"});
    m.node("Mul", {"x", "s"}, {"y"});
    const Graph g = prepared(m, 1);
    const Node& mul = only_node(g);
    REQUIRE(g.constants.count(mul.inputs[1]));
    CHECK(g.constants.at(mul.inputs[1]).f32 == std::vector<float>{1.f, 1.f, -1.f, -1.f});
  }
  {
    ModelBuilder m;  // Mod of shape arithmetic (torch 2.x attention): Python's sign rule by default
    m.input("x", {-1, 4}).output("y").ints("a", {7, -7, 7, -7}).ints("b", {3, 3, -3, -3});
    m.node("Mod", {"a", "b"}, {"m"});
    m.node("Cast", {"m"}, {"f"}).add_attribute()->CopyFrom([] {
      onnx::AttributeProto to;
      to.set_name("to");
      to.set_type(onnx::AttributeProto::INT);
      to.set_i(onnx::TensorProto::FLOAT);
      return to;
    }());
    m.node("Add", {"x", "f"}, {"y"});
    const Graph g = prepared(m, 1);
    CHECK(g.constants.at(only_node(g).inputs[1]).f32 == std::vector<float>{1, 2, -2, -1});
  }
  ModelBuilder m;
  m.input("x", {-1, 4}).output("y").weights("zero", {1}, {0.f});
  m.node("Equal", {"x", "zero"}, {"y"}, "is_zero");
  const std::string e = error_of([&] { prepared(m, 1); });
  CHECK_THAT(e, Contains("node 'is_zero' (Equal)"));
  CHECK_THAT(e, Contains("only supported on constants and shapes"));
}

TEST_CASE("ScatterND folds with and without a reduction", "[nn][passes]") {
  for (const std::string reduction : {"none", "add"}) {
    ModelBuilder m(17);  // data [3,2]; rows 2 and 0 replaced by (or added to) the updates
    m.input("x", {-1, 3, 2}).output("y").weights("data", {3, 2}, {1, 2, 3, 4, 5, 6}).weights("updates", {2, 2}, {10, 20, 30, 40});
    auto& idx = m.initializer("idx");
    idx.set_data_type(onnx::TensorProto::INT64);
    idx.add_dims(2);
    idx.add_dims(1);
    idx.add_int64_data(2);
    idx.add_int64_data(-3);
    auto* attr = m.node("ScatterND", {"data", "idx", "updates"}, {"s"}).add_attribute();
    attr->set_name("reduction");
    attr->set_type(onnx::AttributeProto::STRING);
    attr->set_s(reduction);
    m.node("Add", {"x", "s"}, {"y"});
    const Graph g = prepared(m, 1);
    INFO(reduction);
    CHECK(g.constants.at(only_node(g).inputs[1]).f32 ==
          (reduction == "none" ? std::vector<float>{30, 40, 3, 4, 10, 20} : std::vector<float>{31, 42, 3, 4, 15, 26}));
  }
}

TEST_CASE("Dropout in training mode is removed only when its ratio is a constant 0", "[nn][passes]") {
  for (float ratio : {0.f, 0.5f}) {
    ModelBuilder m(13);
    m.input("x", {-1, 4}).output("y").weights("ratio", {}, {ratio});
    auto& training = m.initializer("training");
    training.set_data_type(onnx::TensorProto::BOOL);
    training.add_int32_data(1);
    m.node("Dropout", {"x", "ratio", "training"}, {"d"}, "drop");
    m.node("Relu", {"d"}, {"y"});
    if (ratio == 0.f) {
      CHECK(only_node(prepared(m, 1)).op == Op::Relu);
    } else {
      const std::string e = error_of([&] { prepared(m, 1); });
      CHECK_THAT(e, Contains("node 'drop' (Dropout): training_mode=true is not supported"));
    }
  }
}

TEST_CASE("LayerNormalization with a used Mean output and Max of three inputs are refused naming the node", "[nn][passes]") {
  ModelBuilder ln(17);
  ln.input("x", {-1, 4}).output("y").output("mean").weights("scale", {4}, {1.f, 1.f, 1.f, 1.f});
  ln.node("LayerNormalization", {"x", "scale"}, {"y", "mean"}, "norm");
  std::string e = error_of([&] { prepared(ln, 1); });
  CHECK_THAT(e, Contains("node 'norm' (LayerNormalization)"));
  CHECK_THAT(e, Contains("is used, which is not supported"));

  ModelBuilder max;
  max.input("a", {-1, 4}).input("b", {-1, 4}).input("c", {-1, 4}).output("y");
  max.node("Max", {"a", "b", "c"}, {"y"}, "top");
  e = error_of([&] { prepared(max, 1); });
  CHECK_THAT(e, Contains("node 'top' (Max)"));
  CHECK_THAT(e, Contains("only two are supported"));
}

// ---- removal ------------------------------------------------------------------------------------------------

TEST_CASE("Identity Dropout and dead nodes are removed and output names kept", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 3}).output("out");
  m.node("Relu", {"x"}, {"r"});
  m.node("Dropout", {"r"}, {"d"});
  m.node("Sigmoid", {"d"}, {"unused"}, "dead_sigmoid");
  m.node("Tanh", {"d"}, {"t"});
  m.node("Identity", {"t"}, {"out"});
  const Graph g = prepared(m, 2);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 2);
  CHECK(g.nodes[0].op == Op::Relu);
  CHECK(g.nodes[1].op == Op::Tanh);
  CHECK(g.nodes[1].inputs == std::vector<std::string>{g.nodes[0].outputs[0]});
  CHECK(g.nodes[1].outputs == std::vector<std::string>{"out"});
  CHECK(g.outputs[0].name == "out");
  CHECK(g.shapes.count("out"));
  CHECK(std::any_of(g.rewrites.begin(), g.rewrites.end(), [](const std::string& r) { return r.find("dead_sigmoid") != std::string::npos; }));
  CHECK(std::any_of(g.rewrites.begin(), g.rewrites.end(), [](const std::string& r) { return r.find("(Dropout)") != std::string::npos; }));
}

// ---- BatchNormalization folding and fusion ------------------------------------------------------------------

TEST_CASE("BatchNormalization folds into the Conv with the same numbers as conv then bn", "[nn][passes]") {
  const Shape xs{1, 2, 5, 5}, ws{3, 2, 3, 3};
  const auto x = random_values(50, 1), w = random_values(54, 2), b = random_values(3, 3);
  const auto scale = random_values(3, 4, 0.5f, 2.f), shift = random_values(3, 5), mean = random_values(3, 6);
  const auto var = random_values(3, 7, 0.1f, 3.f);
  const float epsilon = 1e-3f;
  ModelBuilder m;
  m.input("x", {-1, 2, 5, 5}).output("y").weights("w", ws, w).weights("b", {3}, b);
  m.weights("scale", {3}, scale).weights("shift", {3}, shift).weights("mean", {3}, mean).weights("var", {3}, var);
  test::set_ints(m.node("Conv", {"x", "w", "b"}, {"c"}, "conv"), "pads", {1, 1, 1, 1});
  test::set_float(m.node("BatchNormalization", {"c", "scale", "shift", "mean", "var"}, {"y"}, "bn"), "epsilon", epsilon);
  const Graph g = prepared(m);
  const Node& conv = only_node(g);
  CHECK(conv.op == Op::Conv);
  CHECK(conv.outputs[0] == "y");
  CHECK(conv.inputs[0] == "x");
  REQUIRE(g.is_constant(conv.inputs[2]));

  // Reference: the convolution, then BatchNormalization's formula, per element.
  std::vector<float> expected = reference_conv(x, xs, w, ws, b, 1);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const std::size_t c = (i / 25) % 3;
    expected[i] = (expected[i] - mean[c]) / std::sqrt(var[c] + epsilon) * scale[c] + shift[c];
  }
  const std::vector<float> folded =
      reference_conv(x, xs, g.constants.at(conv.inputs[1]).f32, ws, g.constants.at(conv.inputs[2]).f32, 1);
  REQUIRE(folded.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(folded[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-5));
  CHECK(std::any_of(g.rewrites.begin(), g.rewrites.end(), [](const std::string& r) {
    return r == "folded node 'bn' (BatchNormalization) into node 'conv' (Conv)";
  }));
}

TEST_CASE("BatchNormalization stays when the Conv output has another reader", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 1, 4, 4}).output("y").output("c").weights("w", {2, 1, 1, 1}, {1.f, 2.f});
  for (const char* p : {"s", "b", "mu", "v"}) m.weights(p, {2}, {1.f, 1.f});
  m.node("Conv", {"x", "w"}, {"c"});
  m.node("BatchNormalization", {"c", "s", "b", "mu", "v"}, {"y"});
  const Graph g = prepared(m);
  CHECK(count_op(g, "BatchNormalization") == 1);
  CHECK(count_op(g, "Conv") == 1);
  check_prepared_form(g);
}

TEST_CASE("a ResNet block fuses into Convs with residual and activation", "[nn][passes]") {
  // relu(bn2(conv2(relu(bn1(conv1(x))))) + x)
  ModelBuilder m;
  m.input("x", {-1, 4, 6, 6}).output("out");
  for (const char* c : {"w1", "w2"}) m.weights(c, {4, 4, 3, 3}, random_values(144, 9));
  for (const char* bn : {"1", "2"})
    for (const char* p : {"s", "b", "mu", "v"}) m.weights(std::string(p) + bn, {4}, random_values(4, 10, 0.5f, 1.5f));
  test::set_ints(m.node("Conv", {"x", "w1"}, {"c1"}, "conv1"), "pads", {1, 1, 1, 1});
  m.node("BatchNormalization", {"c1", "s1", "b1", "mu1", "v1"}, {"n1"});
  m.node("Relu", {"n1"}, {"r1"});
  test::set_ints(m.node("Conv", {"r1", "w2"}, {"c2"}, "conv2"), "pads", {1, 1, 1, 1});
  m.node("BatchNormalization", {"c2", "s2", "b2", "mu2", "v2"}, {"n2"});
  m.node("Add", {"n2", "x"}, {"sum"});
  m.node("Relu", {"sum"}, {"out"});
  const Graph g = prepared(m, 2);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 2);
  const Node& first = g.nodes[0];
  const Node& second = g.nodes[1];
  CHECK(first.name == "conv1");
  CHECK(first.attrs.s("activation", "?") == "Relu");
  CHECK(first.inputs[3].empty());
  CHECK(second.name == "conv2");
  CHECK(second.inputs[0] == first.outputs[0]);
  CHECK(second.inputs[3] == "x");
  CHECK(second.attrs.s("activation", "?") == "Relu");
  CHECK(second.outputs[0] == "out");
  const std::string text = describe_graph(g);
  CHECK_THAT(text, Contains("Conv+Add+Relu"));
  CHECK_THAT(text, Contains("fused residual node"));
}

TEST_CASE("fusion leaves values that have other readers or are graph outputs", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 2, 3, 3}).output("r").output("c2").output("second").weights("w", {2, 2, 1, 1}, random_values(4, 11));
  m.node("Conv", {"x", "w"}, {"c1"});
  m.node("Relu", {"c1"}, {"r"});
  m.node("Sigmoid", {"c1"}, {"second"});  // c1 has two readers: no fusion
  m.node("Conv", {"x", "w"}, {"c2"});
  m.node("Relu", {"c2"}, {"unused_relu"});  // dead; c2 is a graph output
  const Graph g = prepared(m, 1);
  check_prepared_form(g);
  CHECK(count_op(g, "Relu") == 1);
  CHECK(count_op(g, "Sigmoid") == 1);
  for (const auto& n : g.nodes)
    if (n.op == Op::Conv) CHECK(n.attrs.s("activation", "?").empty());
}

TEST_CASE("a per-channel constant Add joins the bias and Clip fuses with its bounds", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 2, 3, 3}).output("y").weights("w", {2, 2, 1, 1}, random_values(4, 12)).weights("b", {2}, {0.25f, -1.f});
  m.weights("channel_shift", {2, 1, 1}, {1.f, 2.f}).weights("lo", {}, {0.f}).weights("hi", {}, {6.f});
  m.node("Conv", {"x", "w", "b"}, {"c"});
  m.node("Add", {"channel_shift", "c"}, {"shifted"});
  m.node("Clip", {"shifted", "lo", "hi"}, {"y"});
  const Graph g = prepared(m, 1);
  const Node& conv = only_node(g);
  CHECK(g.constants.at(conv.inputs[2]).f32 == std::vector<float>{1.25f, 1.f});
  CHECK(conv.attrs.s("activation", "") == "Clip");
  CHECK(conv.attrs.f("act_alpha", -1.f) == 0.f);
  CHECK(conv.attrs.f("act_beta", -1.f) == 6.f);
  CHECK(conv.outputs[0] == "y");
}

TEST_CASE("products by a constant matrix become Linear nodes with bias, scale, residual and activation fused", "[nn][passes]") {
  // y = relu(((x W + b) * gamma) + s): one Linear; z = Gemm(x2, V, c; transB, alpha 0.5, beta 2): another.
  ModelBuilder m;
  m.input("x", {-1, 5, 6}).input("s", {-1, 5, 7}).input("x2", {-1, 6}).output("y").output("z");
  const auto w = random_values(42, 60), b = random_values(7, 61), gamma = random_values(7, 62);
  const auto v = random_values(42, 63), c = random_values(7, 64);
  m.weights("w", {6, 7}, w).weights("b", {7}, b).weights("gamma", {1, 1, 7}, gamma);
  m.weights("v", {7, 6}, v).weights("c", {1, 7}, c);
  m.node("MatMul", {"x", "w"}, {"xw"});
  m.node("Add", {"xw", "b"}, {"xwb"});
  m.node("Mul", {"gamma", "xwb"}, {"scaled"});
  m.node("Add", {"scaled", "s"}, {"sum"});
  m.node("Relu", {"sum"}, {"y"});
  auto& gemm = m.node("Gemm", {"x2", "v", "c"}, {"z"});
  test::set_int(gemm, "transB", 1);
  test::set_float(gemm, "alpha", 0.5f);
  test::set_float(gemm, "beta", 2.f);
  const Graph g = prepared(m, 3);
  check_prepared_form(g);
  REQUIRE(g.nodes.size() == 2);
  for (const Node& n : g.nodes) CHECK(n.op == Op::Linear);
  const Node& first = g.nodes[0].outputs[0] == "y" ? g.nodes[0] : g.nodes[1];
  CHECK(first.inputs[3] == "s");
  CHECK(first.attrs.s("activation", "") == "Relu");
  CHECK_THAT(describe_graph(g), Contains("Linear+Add+Relu"));

  const auto x = random_values(3 * 5 * 6, 65), sv = random_values(3 * 5 * 7, 66), x2 = random_values(3 * 6, 67);
  std::vector<float> y(3 * 5 * 7), z(3 * 7);
  CpuEngine engine(g);
  engine.run({x.data(), sv.data(), x2.data()}, {y.data(), z.data()});
  for (int r = 0; r < 15; ++r)
    for (int j = 0; j < 7; ++j) {
      double acc = 0;
      for (int k = 0; k < 6; ++k) acc += double(x[r * 6 + k]) * w[k * 7 + j];
      const double want = std::max(0.0, (acc + b[j]) * gamma[j] + sv[r * 7 + j]);
      CHECK(std::fabs(y[r * 7 + j] - want) <= 1e-5);
    }
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 7; ++j) {
      double acc = 0;
      for (int k = 0; k < 6; ++k) acc += double(x2[r * 6 + k]) * v[j * 6 + k];
      CHECK(std::fabs(z[r * 7 + j] - (0.5 * acc + 2.0 * c[j])) <= 1e-5);
    }
}

TEST_CASE("products that are not by a constant matrix, and a scale after a residual, are left alone", "[nn][passes]") {
  ModelBuilder m;
  m.input("a", {-1, 4, 6}).input("bt", {-1, 6, 4}).input("x", {-1, 6}).input("s", {-1, 7}).output("p").output("q");
  m.output("t");
  m.weights("w", {6, 7}, random_values(42, 70)).weights("gamma", {7}, random_values(7, 71));
  m.weights("full", {3, 7}, random_values(21, 72)).weights("v", {6, 7}, random_values(42, 73));
  m.node("MatMul", {"a", "bt"}, {"p"});  // both computed
  m.node("MatMul", {"x", "w"}, {"xw"});
  m.node("Add", {"xw", "s"}, {"res"});
  m.node("Mul", {"res", "gamma"}, {"q"});  // the residual would be scaled too
  m.node("Gemm", {"x", "v", "full"}, {"t"});  // C varies along rows
  const Graph g = prepared(m, 3);
  check_prepared_form(g);
  CHECK(count_op(g, "MatMul") == 1);
  CHECK(count_op(g, "Linear") == 1);
  CHECK(count_op(g, "Mul") == 1);
  CHECK(count_op(g, "Gemm") == 1);
}

namespace {
// nn.MultiheadAttention as exported: sequence-first Q [5, 4, 8], K [5, 4, 8], V [5, 4, 6] each transposed to
// batch-first (K straight to [4, 8, 7]), attention, the output transposed back. `q_also_read`: the Transpose
// of Q has a second reader (a graph output), so it must stay.
ModelBuilder sequence_first_attention(bool q_also_read) {
  ModelBuilder m(17);
  m.input("q", {5, 4, 8}).input("k", {5, 4, 8}).input("v", {5, 4, 6}).output("y");
  if (q_also_read) m.output("qt");
  m.weights("scale", {}, {0.3f});
  test::set_ints(m.node("Transpose", {"q"}, {"qt"}), "perm", {1, 0, 2});
  test::set_ints(m.node("Transpose", {"k"}, {"kt"}), "perm", {1, 2, 0});
  test::set_ints(m.node("Transpose", {"v"}, {"vt"}), "perm", {1, 0, 2});
  m.node("MatMul", {"qt", "kt"}, {"s"});
  m.node("Mul", {"s", "scale"}, {"scaled"});
  test::set_int(m.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
  m.node("MatMul", {"p", "vt"}, {"o"});
  test::set_ints(m.node("Transpose", {"o"}, {"y"}), "perm", {1, 0, 2});
  return m;
}
}  // namespace

// torch 2's export of the same: each of Q, K, V [5, 6, 8] transposed to [6, 5, 8] and reshaped to heads
// [2, 3, 5, 8]; K^T by a Transpose of the last two dims; the output [2, 3, 5, 4] transposed to [5, 2, 3, 4].
ModelBuilder sequence_first_attention_with_heads() {
  ModelBuilder m(17);
  m.input("q", {5, 6, 8}).input("k", {5, 6, 8}).input("v", {5, 6, 4}).output("y");
  m.weights("root_d", {}, {2.f}).ints("heads", {2, 3, 5, 8}).ints("heads_v", {2, 3, 5, 4});
  for (const char* x : {"q", "k", "v"}) {
    const std::string s = x;
    test::set_ints(m.node("Transpose", {s}, {s + "t"}), "perm", {1, 0, 2});
    m.node("Reshape", {s + "t", s == "v" ? "heads_v" : "heads"}, {s + "4"});
  }
  test::set_ints(m.node("Transpose", {"k4"}, {"kT"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", {"q4", "kT"}, {"s"});
  m.node("Div", {"s", "root_d"}, {"scaled"});
  test::set_int(m.node("Softmax", {"scaled"}, {"p"}), "axis", -1);
  m.node("MatMul", {"p", "v4"}, {"o"});
  test::set_ints(m.node("Transpose", {"o"}, {"y"}), "perm", {2, 0, 1, 3});
  return m;
}

TEST_CASE("attention on sequence-first tensors split into heads reads and writes them in place", "[nn][passes][attention]") {
  const Graph g = prepare(sequence_first_attention_with_heads().load(), 5);
  check_prepared_form(g);
  CHECK(count_op(g, "Transpose") == 0);
  REQUIRE(count_op(g, "Attention") == 1);
  const Node& a = *std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Attention; });
  CHECK(a.attrs.ints("seq_axis") == Ints{0, 0, 0, 0});  // every operand sequence-first
  CHECK(g.shape_of(a.inputs[0]) == Shape{5, 2, 3, 8});  // the held Q, reshaped to heads in place
  CHECK(a.outputs[0] == "y");
  CHECK(a.attrs.f("scale", 0.f) == Approx(0.5f));
  const std::int64_t T = 5, B = 6, d = 8, dv = 4;
  const auto q = random_values(T * B * d, 90), k = random_values(T * B * d, 91), v = random_values(T * B * dv, 92);
  std::vector<float> y(static_cast<std::size_t>(T * B * dv));
  CpuEngine engine(g);
  engine.run({q.data(), k.data(), v.data()}, {y.data()});
  for (std::int64_t b = 0; b < B; ++b)  // b = n * 3 + h, as the held [S, N, H, d] lays them out
    for (std::int64_t t = 0; t < T; ++t) {
      std::vector<double> p(static_cast<std::size_t>(T));
      double max = -1e30, sum = 0;
      for (std::int64_t j = 0; j < T; ++j) {
        double dot = 0;
        for (std::int64_t c = 0; c < d; ++c) dot += double(q[(t * B + b) * d + c]) * k[(j * B + b) * d + c];
        max = std::max(max, p[j] = 0.5 * dot);
      }
      for (auto& e : p) sum += (e = std::exp(e - max));
      for (std::int64_t c = 0; c < dv; ++c) {
        double want = 0;
        for (std::int64_t j = 0; j < T; ++j) want += p[j] / sum * v[(j * B + b) * dv + c];
        CHECK(std::fabs(y[(t * B + b) * dv + c] - want) <= 1e-5);
      }
    }
}

TEST_CASE("attention on sequence-first tensors reads and writes them in place", "[nn][passes][attention]") {
  for (bool q_also_read : {false, true}) {
    INFO("Q's Transpose also read: " << q_also_read);
    ModelBuilder m = sequence_first_attention(q_also_read);
    const Graph g = prepare(m.load(), 5);
    check_prepared_form(g);
    REQUIRE(count_op(g, "Attention") == 1);
    const Node& a = *std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Attention; });
    const Ints want_axes = {q_also_read ? 1 : 0, 0, 0, 0};  // Q batch-first when its Transpose stays
    CHECK(a.attrs.ints("seq_axis") == want_axes);
    CHECK(a.inputs[1] == "k");
    CHECK(a.inputs[2] == "v");
    CHECK(a.outputs[0] == "y");
    CHECK(count_op(g, "Transpose") == (q_also_read ? 1u : 0u));
    CHECK(a.attrs.f("scale", 0.f) == Approx(0.3f));

    const Shape qs = g.shape_of("q"), ks = g.shape_of("k");
    const std::int64_t T = qs[0], B = qs[1], d = qs[2], S = ks[0], dv = 6;
    const auto q = random_values(static_cast<std::size_t>(T * B * d), 80), k = random_values(static_cast<std::size_t>(S * B * d), 81);
    const auto v = random_values(static_cast<std::size_t>(S * B * dv), 82);
    std::vector<float> y(static_cast<std::size_t>(T * B * dv)), qt(q.size());
    CpuEngine engine(g);
    std::vector<float*> outs = {y.data()};
    if (q_also_read) outs.push_back(qt.data());
    engine.run({q.data(), k.data(), v.data()}, outs);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<double> p(static_cast<std::size_t>(S));
        double max = -1e30, sum = 0;
        for (std::int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (std::int64_t c = 0; c < d; ++c) dot += double(q[(t * B + b) * d + c]) * k[(j * B + b) * d + c];
          p[j] = 0.3 * dot;
          max = std::max(max, p[j]);
        }
        for (auto& e : p) sum += (e = std::exp(e - max));
        for (std::int64_t c = 0; c < dv; ++c) {
          double want = 0;
          for (std::int64_t j = 0; j < S; ++j) want += p[j] / sum * v[(j * B + b) * dv + c];
          CHECK(std::fabs(y[(t * B + b) * dv + c] - want) <= 1e-5);
        }
      }
  }
}

namespace {
// torch 2's split of nn.MultiheadAttention's packed product P ("p", [S=5, N=2, 3E], E = 3 heads x 4) into Q, K
// and V (Reshape [S, N, 3, E], Unsqueeze, Transpose to [3, S, N, 1, E], Squeeze and one Slice each, then the head
// Reshapes and Transposes) and the attention over them, whose output "o" is [N, heads, S, d].
void packed_attention_from_p(ModelBuilder& m) {
  m.weights("root_d", {}, {2.f}).ints("split", {5, 2, 3, 12}).ints("unsqueeze", {1, 5, 2, 3, 12});
  m.ints("squeeze", {3, 5, 2, 12}).ints("rows", {5, 6, 4}).ints("heads", {2, 3, 5, 4}).ints("axis0", {0});
  m.node("Reshape", {"p", "split"}, {"p4"});
  m.node("Reshape", {"p4", "unsqueeze"}, {"p5"});
  test::set_ints(m.node("Transpose", {"p5"}, {"pt"}), "perm", {3, 1, 2, 0, 4});
  m.node("Reshape", {"pt", "squeeze"}, {"parts"});
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::string s = std::string(1, "qkv"[i]);
    m.ints(s + "_start", {i}).ints(s + "_end", {i + 1});
    m.node("Slice", {"parts", s + "_start", s + "_end", "axis0"}, {s + "_part"});
    m.node("Reshape", {s + "_part", "rows"}, {s + "_rows"});
    test::set_ints(m.node("Transpose", {s + "_rows"}, {s + "t"}), "perm", {1, 0, 2});
    m.node("Reshape", {s + "t", "heads"}, {s + "4"});
  }
  test::set_ints(m.node("Transpose", {"k4"}, {"kT"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", {"q4", "kT"}, {"s"});
  m.node("Div", {"s", "root_d"}, {"scaled"});
  test::set_int(m.node("Softmax", {"scaled"}, {"probs"}), "axis", -1);
  m.node("MatMul", {"probs", "v4"}, {"o"});
}
}  // namespace

namespace {
// torch 2's export of nn.MultiheadAttention's self-attention: one product P [S=5, N=2, 3E] (E = 3 heads x 4)
// split into Q, K, V by Reshape [S, N, 3, E], Unsqueeze, Transpose to [3, S, N, 1, E], Squeeze and one Slice
// each, then the head Reshapes and Transposes. `k_also_read`: K's Slice is also a graph output.
ModelBuilder packed_self_attention(bool k_also_read) {
  ModelBuilder m(17);
  m.input("x", {5, 2, 36}).output("y");
  if (k_also_read) m.output("k_part");
  m.node("Relu", {"x"}, {"p"});
  packed_attention_from_p(m);
  test::set_ints(m.node("Transpose", {"o"}, {"y"}), "perm", {2, 0, 1, 3});
  return m;
}

const Node& attention_of(const Graph& g) {
  const auto it = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Attention; });
  REQUIRE(it != g.nodes.end());
  return *it;
}
}  // namespace

TEST_CASE("self-attention reads Q K and V as parts of the packed product", "[nn][passes][attention]") {
  const Graph fused = prepare(packed_self_attention(false).load(), 5);
  check_prepared_form(fused);
  CHECK(count_op(fused, "Transpose") == 0);
  CHECK(count_op(fused, "Slice") == 0);
  const Node& a = attention_of(fused);
  CHECK(a.attrs.i("packed_axis", -1) == 2);
  CHECK(a.attrs.ints("packed_part") == Ints{0, 1, 2});
  CHECK(a.inputs[0] == a.inputs[1]);
  CHECK(a.inputs[0] == a.inputs[2]);
  CHECK(fused.shape_of(a.inputs[0]) == Shape{5, 2, 3, 3, 4});  // [S, N, parts, heads, d], a view of P
  // The unfused reference: the same graph with K's Slice also read, which blocks the parts (not the attention).
  const Graph unfused = prepare(packed_self_attention(true).load(), 5);
  CHECK_FALSE(attention_of(unfused).attrs.has("packed_axis"));
  CHECK(count_op(unfused, "Slice") == 3);
  const auto x = random_values(5 * 2 * 36, 93, -2.f, 2.f);
  std::vector<float> got(5 * 2 * 3 * 4), want(got.size()), k_part(5 * 2 * 12);
  CpuEngine(fused).run({x.data()}, {got.data()});
  CpuEngine(unfused).run({x.data()}, {want.data(), k_part.data()});
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-5);
  // K's part is columns [12, 24) of each row of relu(x).
  for (std::size_t r = 0; r < 10; ++r)
    for (std::size_t c = 0; c < 12; ++c) CHECK(k_part[r * 12 + c] == std::max(0.f, x[r * 36 + 12 + c]));
}

TEST_CASE("torch 1.13's q k v split by Slices of the last dim is read in place at batch 1", "[nn][passes][attention]") {
  // P [S=5, N=1, 3E] sliced into [S, 1, E] thirds, each reshaped to [S, heads=3, d=4] and transposed, as
  // torch 1.13's export of nn.MultiheadAttention writes it.
  ModelBuilder m(17);
  m.input("x", {5, 1, 36}).output("y").weights("root_d", {}, {2.f}).ints("rows", {5, 3, 4}).ints("last", {2});
  m.node("Relu", {"x"}, {"p"});
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::string s = std::string(1, "qkv"[i]);
    m.ints(s + "_start", {i * 12}).ints(s + "_end", {i * 12 + 12});
    m.node("Slice", {"p", s + "_start", s + "_end", "last"}, {s + "_part"});
    m.node("Reshape", {s + "_part", "rows"}, {s + "_rows"});
    test::set_ints(m.node("Transpose", {s + "_rows"}, {s + "t"}), "perm", {1, 0, 2});
  }
  test::set_ints(m.node("Transpose", {"kt"}, {"kT"}), "perm", {0, 2, 1});
  m.node("MatMul", {"qt", "kT"}, {"s"});
  m.node("Div", {"s", "root_d"}, {"scaled"});
  test::set_int(m.node("Softmax", {"scaled"}, {"probs"}), "axis", -1);
  m.node("MatMul", {"probs", "vt"}, {"o"});
  test::set_ints(m.node("Transpose", {"o"}, {"y"}), "perm", {1, 0, 2});
  const Graph fused = prepare(m.load(), 5);
  check_prepared_form(fused);
  CHECK(count_op(fused, "Slice") == 0);
  CHECK(attention_of(fused).attrs.i("packed_axis", -1) == 1);
  m.output("q_part");  // the reference: Q's Slice also read
  const Graph unfused = prepare(m.load(), 5);
  CHECK(count_op(unfused, "Slice") == 3);
  const auto x = random_values(5 * 36, 94, -2.f, 2.f);
  std::vector<float> got(5 * 12), want(5 * 12), q_part(5 * 12);
  CpuEngine(fused).run({x.data()}, {got.data()});
  CpuEngine(unfused).run({x.data()}, {want.data(), q_part.data()});
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-5);
}

// ---- attention layouts (nn/passes/attention_layout.cpp) ---------------------------------------------------------

namespace {
// torchvision's ViT encoder block as nn.MultiheadAttention(batch_first=True) exports it with torch 2, x [N=2, S=5,
// E=12] (3 heads of 4): Transpose to [S, N, E], in_proj, the packed q|k|v split (as packed_self_attention),
// attention, Y [S, N, heads, d] -> Reshape [S*N, E] -> out_proj -> Reshape [S, N, E] -> Transpose back, plus x.
// `graph_outputs`: values also made graph outputs (which must block the rewrites that would remove them).
ModelBuilder vit_block(const std::vector<std::string>& graph_outputs = {}) {
  ModelBuilder m(17);
  m.input("x", {2, 5, 12}).output("y");
  for (const auto& o : graph_outputs) m.output(o);
  m.weights("w_in", {12, 36}, random_values(12 * 36, 60)).weights("b_in", {36}, random_values(36, 61));
  m.weights("w_out", {12, 12}, random_values(12 * 12, 62)).weights("b_out", {12}, random_values(12, 63));
  m.ints("merged", {10, 12}).ints("unmerged", {5, 2, 12});
  test::set_ints(m.node("Transpose", {"x"}, {"xs"}), "perm", {1, 0, 2});
  m.node("MatMul", {"xs", "w_in"}, {"p0"});
  m.node("Add", {"p0", "b_in"}, {"p"});
  packed_attention_from_p(m);
  test::set_ints(m.node("Transpose", {"o"}, {"o_seq"}), "perm", {2, 0, 1, 3});
  m.node("Reshape", {"o_seq", "merged"}, {"o_rows"});
  m.node("MatMul", {"o_rows", "w_out"}, {"proj0"});
  m.node("Add", {"proj0", "b_out"}, {"proj"});
  m.node("Reshape", {"proj", "unmerged"}, {"proj_seq"});
  test::set_ints(m.node("Transpose", {"proj_seq"}, {"attended"}), "perm", {1, 0, 2});
  m.node("Add", {"attended", "x"}, {"y"});
  return m;
}

// torchvision's Swin block as exported: x [windows=4, tokens=6, C=12] -> qkv Linear -> Reshape [4, 6, 3, heads=3,
// d=4] -> Transpose (2, 0, 3, 1, 4) -> q, k, v = parts 0, 1, 2 -> attention with a relative position bias ->
// Transpose (0, 2, 1, 3) -> Reshape [4, 6, 12] -> proj. `y_perm`: the output Transpose's perm (another one
// moves more than the sequence axis and must stay).
ModelBuilder swin_block(const std::vector<std::string>& graph_outputs = {}, Ints y_perm = {0, 2, 1, 3}) {
  ModelBuilder m(17);
  m.input("x", {4, 6, 12}).output("y");
  for (const auto& o : graph_outputs) m.output(o);
  m.weights("w_qkv", {12, 36}, random_values(12 * 36, 70)).weights("b_qkv", {36}, random_values(36, 71));
  m.weights("w_proj", {12, 12}, random_values(12 * 12, 72)).weights("b_proj", {12}, random_values(12, 73));
  m.weights("scale", {}, {0.5f}).weights("position", {3, 6, 6}, random_values(3 * 6 * 6, 74));
  m.ints("split", {4, 6, 3, 3, 4}).ints("one_part", {4, 3, 6, 4}).ints("rows", {4, 6, 12}).ints("axis0", {0});
  m.node("MatMul", {"x", "w_qkv"}, {"qkv0"});
  m.node("Add", {"qkv0", "b_qkv"}, {"qkv"});
  m.node("Reshape", {"qkv", "split"}, {"qkv5"});
  test::set_ints(m.node("Transpose", {"qkv5"}, {"qkv_t"}), "perm", {2, 0, 3, 1, 4});
  for (std::int64_t i = 0; i < 3; ++i) {
    const std::string s = std::string(1, "qkv"[i]);
    m.ints(s + "_start", {i}).ints(s + "_end", {i + 1});
    m.node("Slice", {"qkv_t", s + "_start", s + "_end", "axis0"}, {s + "_part"});
    m.node("Reshape", {s + "_part", "one_part"}, {s + "4"});
  }
  m.node("Mul", {"q4", "scale"}, {"q_scaled"});
  test::set_ints(m.node("Transpose", {"k4"}, {"kT"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", {"q_scaled", "kT"}, {"s"});
  m.node("Add", {"s", "position"}, {"biased"});
  test::set_int(m.node("Softmax", {"biased"}, {"probs"}), "axis", -1);
  m.node("MatMul", {"probs", "v4"}, {"o"});
  test::set_ints(m.node("Transpose", {"o"}, {"o_t"}), "perm", y_perm);
  m.node("Reshape", {"o_t", "rows"}, {"o_rows"});
  m.node("MatMul", {"o_rows", "w_proj"}, {"proj0"});
  m.node("Add", {"proj0", "b_proj"}, {"y"});
  return m;
}

// y of the model prepared, and of the same model with `graph_outputs` kept as graph outputs (which blocks the
// layout rewrites: the reference), at batch = dim 0 of x; the largest difference.
float rewritten_vs_reference(const std::function<ModelBuilder(const std::vector<std::string>&)>& model,
                             const std::vector<std::string>& graph_outputs) {
  const Graph rewritten = prepare(model({}).load(), model({}).load().inputs[0].shape[0]);
  const Graph reference = prepare(model(graph_outputs).load(), model({}).load().inputs[0].shape[0]);
  CHECK(count_op(reference, "Transpose") > 0);
  const auto x = random_values(static_cast<std::size_t>(element_count(rewritten.inputs[0].shape)), 75, -2.f, 2.f);
  std::vector<float> got(static_cast<std::size_t>(element_count(rewritten.shape_of("y")))), want(got.size());
  std::vector<std::vector<float>> extra;
  std::vector<float*> outs{want.data()};
  for (const auto& o : graph_outputs) {
    extra.emplace_back(static_cast<std::size_t>(element_count(reference.shape_of(o))));
    outs.push_back(extra.back().data());
  }
  CpuEngine(rewritten).run({x.data()}, {got.data()});
  CpuEngine(reference).run({x.data()}, outs);
  float worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  return worst;
}
}  // namespace

TEST_CASE("a ViT block's Transposes around attention become operand layouts computing the same values", "[nn][passes][attention]") {
  const Graph g = prepare(vit_block().load(), 2);
  check_prepared_form(g);
  INFO(describe_graph(g));
  CHECK(count_op(g, "Transpose") == 0);
  const Node& a = attention_of(g);
  CHECK(a.attrs.ints("seq_axis") == Ints{1, 1, 1, 1});  // Q, K, V [N, S, heads, d] parts, Y [N, S, heads, d]
  CHECK(a.attrs.i("packed_axis", -1) == 2);
  CHECK(g.shape_of(a.inputs[0]) == Shape{2, 5, 3, 3, 4});
  CHECK(g.shape_of(a.outputs[0]) == Shape{2, 5, 3, 4});
  // The output projection stays batch-first and takes the residual: no Reshape merges the batch.
  CHECK(count_op(g, "Add") == 0);
  CHECK(count_op(g, "Linear") == 2);
  for (const auto& n : g.nodes)
    if (n.op == Op::Reshape) CHECK(g.shape_of(n.outputs[0])[0] == 2);
  CHECK(rewritten_vs_reference(vit_block, {"xs", "proj_seq"}) <= 1e-5f);
}

TEST_CASE("a Swin block's Transposes around attention become operand layouts computing the same values", "[nn][passes][attention]") {
  const Graph g = prepare(swin_block().load(), 4);
  check_prepared_form(g);
  INFO(describe_graph(g));
  CHECK(count_op(g, "Transpose") == 0);
  const Node& a = attention_of(g);
  CHECK(a.attrs.ints("seq_axis") == Ints{1, 1, 1, 1});  // Q, K, V parts of [N, S, 3, heads, d], Y [N, S, heads, d]
  CHECK(a.attrs.i("packed_axis", -1) == 2);
  CHECK(g.shape_of(a.inputs[0]) == Shape{4, 6, 3, 3, 4});
  CHECK(g.shape_of(a.outputs[0]) == Shape{4, 6, 3, 4});
  CHECK(rewritten_vs_reference([](const auto& outs) { return swin_block(outs); }, {"qkv_t", "o_t"}) <= 1e-5f);
}

TEST_CASE("Transposes around attention stay when read elsewhere or graph outputs or moving other axes", "[nn][passes][attention]") {
  SECTION("the ViT input Transpose also read: it stays, the output side is still rewritten") {
    const Graph g = prepare(vit_block({"xs"}).load(), 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Transpose") == 1);
    CHECK(attention_of(g).attrs.ints("seq_axis") == Ints{0, 0, 0, 1});
  }
  SECTION("the ViT projection's output a graph output: the output side stays") {
    const Graph g = prepare(vit_block({"proj_seq"}).load(), 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Transpose") == 1);
    CHECK(attention_of(g).attrs.ints("seq_axis") == Ints{1, 1, 1, 0});
  }
  SECTION("Swin's q|k|v Transpose a graph output: it stays, Y is still written in place") {
    const Graph g = prepare(swin_block({"qkv_t"}).load(), 4);
    check_prepared_form(g);
    CHECK(count_op(g, "Transpose") == 1);
    CHECK(attention_of(g).attrs.ints("seq_axis") == Ints{2, 2, 2, 1});
  }
  SECTION("an output Transpose that also swaps the windows and the heads stays") {
    const Graph g = prepare(swin_block({}, {1, 2, 0, 3}).load(), 4);
    check_prepared_form(g);
    CHECK(count_op(g, "Transpose") == 1);
    CHECK(attention_of(g).attrs.ints("seq_axis") == Ints{1, 1, 1, 2});
    CHECK(rewritten_vs_reference([](const auto& outs) { return swin_block(outs, {1, 2, 0, 3}); }, {"qkv_t"}) <= 1e-5f);
  }
}

namespace {
// x -> Relu r (so that x is run-time data with another reader) -> GELU written as five nodes in `order`:
// 0: (r * (1 + erf(r / sqrt2))) * 0.5 (PyTorch's export); 1: r * ((1 + erf(r * 1/sqrt2)) * 0.5);
// 2: (r * 0.5) * (1 + erf(r / sqrt2)). `half` is the constant the exporter wrote for 0.5.
ModelBuilder gelu_model(int order, float half = 0.5f) {
  ModelBuilder m(17);
  m.input("x", {-1, 3, 8}).output("y").output("r");
  m.weights("sqrt2", {}, {1.41421356f}).weights("inv_sqrt2", {}, {0.70710678f}).weights("one", {}, {1.f});
  m.weights("half", {}, {half});
  m.node("Relu", {"x"}, {"r"});
  if (order == 1) m.node("Mul", {"r", "inv_sqrt2"}, {"scaled"});
  else m.node("Div", {"r", "sqrt2"}, {"scaled"});
  m.node("Erf", {"scaled"}, {"e"});
  m.node("Add", {"one", "e"}, {"a"});
  if (order == 0) {
    m.node("Mul", {"r", "a"}, {"xa"});
    m.node("Mul", {"xa", "half"}, {"y"});
  } else if (order == 1) {
    m.node("Mul", {"a", "half"}, {"ah"});
    m.node("Mul", {"r", "ah"}, {"y"});
  } else {
    m.node("Mul", {"half", "r"}, {"h"});
    m.node("Mul", {"h", "a"}, {"y"});
  }
  return m;
}
}  // namespace

TEST_CASE("the erf form of GELU becomes one Gelu node computing the same values", "[nn][passes]") {
  for (int order = 0; order < 3; ++order) {
    INFO("order " << order);
    const Graph g = prepared(gelu_model(order), 2);
    check_prepared_form(g);
    REQUIRE(g.nodes.size() == 2);
    CHECK(g.nodes[1].op == Op::Gelu);
    CHECK(g.nodes[1].inputs == std::vector<std::string>{"r"});
    CHECK(g.nodes[1].outputs == std::vector<std::string>{"y"});
    CHECK_THAT(describe_graph(g), Contains("into node"));
    const auto x = random_values(48, 40 + static_cast<unsigned>(order), -3.f, 3.f);
    std::vector<float> y(48), r(48);
    CpuEngine engine(g);
    engine.run({x.data()}, {y.data(), r.data()});
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double v = std::max(0.0, static_cast<double>(x[i]));
      CHECK(std::fabs(y[i] - 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)))) <= 1e-6);
    }
  }
}

TEST_CASE("GELU is not fused when a constant differs or an inner value has another reader", "[nn][passes]") {
  {
    const Graph g = prepared(gelu_model(0, 0.49f), 1);
    CHECK(count_op(g, "Gelu") == 0);
    CHECK(count_op(g, "Erf") == 1);
  }
  {
    ModelBuilder m = gelu_model(0);
    m.output("e");  // erf's value is a graph output: it must stay
    const Graph g = prepared(m, 1);
    CHECK(count_op(g, "Gelu") == 0);
    CHECK(count_op(g, "Erf") == 1);
  }
}

namespace {
// nn.MultiheadAttention's export (seq-first, one batch of heads): q, k, v [T, B*H, d] made by Reshapes of one
// input; q / sqrt(d); k transposed to [B*H, d, T] in one Transpose; optional additive bias; softmax; times v.
ModelBuilder attention_model(bool with_bias, bool scale_after = false) {
  ModelBuilder m(17);
  m.input("x", {-1, 6, 3, 8}).output("y");  // [T=6, B (batch), 3 heads, d=8] per batch item after the reshape
  m.weights("root_d", {}, {std::sqrt(8.f)}).ints("qkv_shape", {6, -1, 8}).weights("bias", {1, 6, 6},
                                                                                   random_values(36, 50));
  m.node("Relu", {"x"}, {"r"});
  m.node("Reshape", {"r", "qkv_shape"}, {"seq"});                           // [6, B*3, 8]
  test::set_ints(m.node("Transpose", {"seq"}, {"q"}, "to_q"), "perm", {1, 0, 2});   // [B*3, 6, 8]
  test::set_ints(m.node("Transpose", {"seq"}, {"kt"}, "to_kt"), "perm", {1, 2, 0});  // [B*3, 8, 6]
  m.node("Sigmoid", {"q"}, {"v"});
  std::string scores = "scores";
  if (scale_after) {
    m.node("MatMul", {"q", "kt"}, {"raw"});
    m.node("Div", {"raw", "root_d"}, {"scores"});
  } else {
    m.node("Div", {"q", "root_d"}, {"q_scaled"});
    m.node("MatMul", {"q_scaled", "kt"}, {"scores"});
  }
  if (with_bias) {
    m.node("Add", {"bias", scores}, {"biased"});
    scores = "biased";
  }
  test::set_int(m.node("Softmax", {scores}, {"p"}), "axis", -1);
  m.node("MatMul", {"p", "v"}, {"y"});
  return m;
}
}  // namespace

TEST_CASE("scaled dot-product attention becomes one Attention node computing the same values", "[nn][passes]") {
  for (const bool bias : {false, true})
    for (const bool after : {false, true}) {
      INFO("bias " << bias << " scale after the product " << after);
      const ModelBuilder m = attention_model(bias, after);
      const Graph fused = prepared(m, 2);
      check_prepared_form(fused);
      REQUIRE(count_op(fused, "Attention") == 1);
      CHECK(count_op(fused, "Softmax") == 0);
      CHECK(count_op(fused, "MatMul") == 0);
      const Node& a = *std::find_if(fused.nodes.begin(), fused.nodes.end(), [](const Node& n) { return n.op == Op::Attention; });
      CHECK(a.attrs.f("scale", 0.f) == Approx(1 / std::sqrt(8.f)));
      CHECK(a.inputs[3].empty() == !bias);
      CHECK(fused.shape_of(a.inputs[1]) == Shape{6, 6, 8});  // K as keys x depth, no longer transposed
      // The same model with the fusion blocked (the scores are a second output) is the reference.
      ModelBuilder plain = attention_model(bias, after);
      plain.output("p");
      const Graph unfused = prepared(plain, 2);
      CHECK(count_op(unfused, "Attention") == 0);
      const auto x = random_values(2 * 6 * 3 * 8, 51, -2.f, 2.f);
      std::vector<float> got(6 * 6 * 8), want(6 * 6 * 8), probs(6 * 6 * 6);
      CpuEngine(fused).run({x.data()}, {got.data()});
      CpuEngine(unfused).run({x.data()}, {want.data(), probs.data()});
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
    }
}

TEST_CASE("describe_graph reports layers totals and rewrites", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {-1, 3, 32, 32}).output("y").weights("w", {8, 3, 3, 3}, random_values(216, 13)).weights("b", {8}, random_values(8, 14));
  m.weights("fc", {5, 7200}, random_values(36000, 15));
  m.node("Conv", {"x", "w", "b"}, {"c"}, "stem");
  m.node("Relu", {"c"}, {"r"});
  m.node("Flatten", {"r"}, {"f"});
  test::set_int(m.node("Gemm", {"f", "fc"}, {"y"}, "head"), "transB", 1);
  const Graph g = prepared(m, 2);
  const std::string text = describe_graph(g);
  CHECK_THAT(text, Contains("stem"));
  CHECK_THAT(text, Contains("Conv+Relu"));
  CHECK_THAT(text, Contains("[2,8,30,30]"));
  // Parameters 8*27 + 8 + 5*7200 = 36224. FLOPs: Conv 2 * (2*8*30*30) * 27 = 777600, Gemm 2 * (2*5) * 7200 = 144000.
  CHECK_THAT(text, Contains("total: 36224 parameters, 0.9 MFLOPs"));
  CHECK_THAT(text, Contains("weights (f32): 144896 B"));
  // x 24576 B, conv output 57600 B, its Reshape 57600 B, y 40 B. Peak: the Reshape's output while the conv
  // output is still held (x is freed after the Conv).
  CHECK_THAT(text, Contains("activations (f32): 139816 B (136.5 KiB) in all, peak 115200 B (112.5 KiB)"));
  CHECK_THAT(text, Contains("rewrote node 'Flatten_f' (Flatten) as Reshape to [2,7200]"));
  CHECK_THAT(text, Contains("fused activation node 'Relu_r' (Relu) into node 'stem' (Conv)"));
}

// ---- real models exported by PyTorch ------------------------------------------------------------------------

namespace {

// A torchvision model as ONNX: the reference file of tests/nn/export_reference.py when present (default
// opset), else exported here with Debian's torch (cached in the temp folder). "" when neither works.
std::string torchvision_onnx(const std::string& name, int opset) {
  namespace fs = std::filesystem;
  const fs::path reference = fs::path(SLUICE_BINARY_DIR) / "nn-reference" / (name + ".onnx");
  if (opset == 0 && fs::exists(reference)) return reference.string();
  const int version = opset == 0 ? 14 : opset;
  const fs::path dir = fs::temp_directory_path() / "sluice_nn_front_models";
  fs::create_directories(dir);
  const fs::path file = dir / (name + "_opset" + std::to_string(version) + ".onnx");
  if (fs::exists(file)) return file.string();
  const fs::path partial = file.string() + ".partial";
  const std::string command =
      "/usr/bin/python3 -c \"import torch, torchvision; torch.manual_seed(0); "
      "m = torchvision.models." + name + "().eval(); "
      "torch.onnx.export(m, torch.randn(1, 3, 224, 224), '" + partial.string() + "', opset_version=" +
      std::to_string(version) + ", input_names=['input'], output_names=['output'], "
      "dynamic_axes={'input': {0: 'batch'}, 'output': {0: 'batch'}})\" > /dev/null 2>&1";
  if (std::system(command.c_str()) != 0) return "";
  fs::rename(partial, file);
  return file.string();
}

}  // namespace

TEST_CASE("torchvision resnet18 prepares to 20 fused Convs", "[nn][passes][models]") {
  for (int opset : {0, 11, 17}) {
    INFO("opset " << opset);
    const std::string path = torchvision_onnx("resnet18", opset);
    if (path.empty()) {
      FAIL("could not export resnet18 with /usr/bin/python3 (scripts/setup.sh installs python3-torch, python3-torchvision)");
    }
    const Graph model = load_onnx(path);
    const Graph g = prepare(model, 4);
    check_prepared_form(g);
    CHECK(count_op(g, "Conv") == 20);  // stem + 8 blocks x 2 + 3 downsample
    CHECK(count_op(g, "BatchNormalization") == 0);
    CHECK(count_op(g, "Relu") == 0);
    CHECK(count_op(g, "Add") == 0);
    CHECK(count_op(g, "MaxPool") == 1);
    CHECK(count_op(g, "GlobalAveragePool") == 1);
    CHECK(count_op(g, "Linear") == 1);  // the classifier's Gemm, a product by a constant matrix
    CHECK(g.nodes.size() == 24);
    std::size_t residual = 0;
    for (const auto& n : g.nodes)
      if (n.op == Op::Conv && !n.inputs[3].empty()) {
        ++residual;
        CHECK(n.attrs.s("activation", "") == "Relu");
      }
    CHECK(residual == 8);
    REQUIRE(g.outputs.size() == 1);
    CHECK(g.outputs[0].name == model.outputs[0].name);
    CHECK(g.outputs[0].shape == Shape{4, 1000});
  }
}

TEST_CASE("torchvision mobilenet_v2 prepares with Clip and residuals fused", "[nn][passes][models]") {
  for (int opset : {0, 11, 17}) {
    INFO("opset " << opset);
    const std::string path = torchvision_onnx("mobilenet_v2", opset);
    if (path.empty()) {
      FAIL("could not export mobilenet_v2 with /usr/bin/python3 (scripts/setup.sh installs python3-torch, python3-torchvision)");
    }
    const Graph g = prepare(load_onnx(path), 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Conv") == 52);
    CHECK(count_op(g, "BatchNormalization") == 0);
    CHECK(count_op(g, "Clip") == 0);
    CHECK(count_op(g, "Add") == 0);
    std::size_t residual = 0, clipped = 0;
    for (const auto& n : g.nodes) {
      if (n.op != Op::Conv) continue;
      residual += !n.inputs[3].empty();
      if (n.attrs.s("activation", "") == "Clip") {
        ++clipped;
        CHECK(n.attrs.f("act_alpha", -1.f) == 0.f);
        CHECK(n.attrs.f("act_beta", -1.f) == 6.f);
      }
    }
    CHECK(residual == 10);
    CHECK(clipped == 35);  // every Conv but the 17 linear bottleneck projections
    CHECK(g.outputs[0].shape == Shape{2, 1000});
  }
}

TEST_CASE("every reference model of export_reference.py prepares to the prepared form", "[nn][passes][models]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(SLUICE_BINARY_DIR) / "nn-reference";
  if (!fs::is_directory(dir)) {
    FAIL("no " << dir.string() << ": tests/nn/export_reference.py writes it (CTest's nn_reference fixture)");
  }
  std::size_t models = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".onnx") continue;
    INFO(entry.path().string());
    ++models;
    const Graph model = load_onnx(entry.path().string());
    for (std::int64_t batch : {1, 3}) {
      const Graph g = prepare(model, batch);
      check_prepared_form(g);
      REQUIRE(g.outputs.size() == model.outputs.size());
      for (std::size_t i = 0; i < g.outputs.size(); ++i) {
        CHECK(g.outputs[i].name == model.outputs[i].name);
        CHECK(g.outputs[i].shape.at(0) == batch);
      }
      // The reference output's items must have the prepared output's item shape.
      const fs::path expected = entry.path().parent_path() / (entry.path().stem().string() + ".output.npy");
      if (fs::exists(expected)) {
        const Shape reference = read_npy(expected.string()).shape;
        CHECK(Shape(reference.begin() + 1, reference.end()) == Shape(g.outputs[0].shape.begin() + 1, g.outputs[0].shape.end()));
      }
      CHECK_FALSE(describe_graph(g).empty());
    }
  }
  CHECK(models > 0);
}

// Regression: a model whose input H is 2^60 made cpu::make_conv divide by a wrapped zero (SIGFPE); every shape
// computed from the file is now checked for overflow and size, and the error names the input or node.
TEST_CASE("prepare refuses shapes that overflow or exceed what a value may hold, naming where", "[nn][passes]") {
  auto conv_with_input = [](Ints dims, Ints pads = {0, 0, 0, 0}) {
    ModelBuilder m;
    m.input("x", dims).output("y").weights("w", {2, 1, 1, 1}, {1.f, -1.f});
    test::set_ints(m.node("Conv", {"x", "w"}, {"y"}, "conv1"), "pads", pads);
    return m;
  };
  const std::int64_t huge = std::int64_t{1} << 60;
  CHECK_THAT(error_of([&] { prepared(conv_with_input({-1, 1, huge, 4})); }), Contains("graph input 'x'"));
  CHECK_THAT(error_of([&] { prepared(conv_with_input({-1, 1, huge, huge})); }), Contains("graph input 'x'"));
  // The input fits, the output (2 channels) does not.
  CHECK_THAT(error_of([&] { prepared(conv_with_input({-1, 1, std::int64_t{1} << 34, 4})); }),
             Contains("node 'conv1' (Conv): output 'y' would have shape [1,2,17179869184,4]"));
  // Pads that overflow int64 when added to the input's extent.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  CHECK_THAT(error_of([&] { prepared(conv_with_input({-1, 1, 4, 4}, {max, 0, max, 0})); }),
             Contains("node 'conv1' (Conv): size arithmetic overflows"));
}

TEST_CASE("prepare refuses to fold a constant larger than the fold limit", "[nn][passes]") {
  ModelBuilder m;
  m.input("x", {1, 2}).output("y").ints("dims", {std::int64_t{1} << 40});
  m.node("ConstantOfShape", {"dims"}, {"c"}, "make_big");
  m.node("Add", {"x", "c"}, {"y"});
  CHECK_THAT(error_of([&] { prepared(m); }), Contains("node 'make_big' (ConstantOfShape): folding it would make a constant"));
}

// A model whose working memory exceeds the machine is refused with a message, not std::bad_alloc.
TEST_CASE("cpu engine refuses a model larger than this machine's memory", "[nn][cpu]") {
  ModelBuilder m;
  // 1 x 1 x 2^32 x 4 in, 2 x 2^32 x 4 = 2^35 floats (128 GiB) out of the conv; the arena holds it for the Transpose.
  m.input("x", {-1, 1, std::int64_t{1} << 32, 4}).output("y").weights("w", {2, 1, 1, 1}, {1.f, -1.f});
  m.node("Conv", {"x", "w"}, {"c"}, "conv1");
  test::set_ints(m.node("Transpose", {"c"}, {"y"}), "perm", {0, 1, 3, 2});
  const Graph g = prepared(m);
  if (sluice::host_memory_bytes() >= (std::uint64_t{128} << 30)) {
    WARN("this machine has 128 GiB or more: nothing to refuse");
    return;
  }
  CHECK_THAT(error_of([&] { CpuEngine engine(g); }), Contains("of working memory"));
}

TEST_CASE("memory plan refuses sizes whose sum overflows", "[nn][cpu]") {
  const std::size_t max = std::numeric_limits<std::size_t>::max();
  CHECK_THROWS_AS(plan_memory({{max - 4, 0, 0}}, 16), ModelError);
  CHECK_THROWS_AS(plan_memory({{max / 2 + 8, 0, 1}, {max / 2 + 8, 0, 1}}, 16), ModelError);
}

// ---- ops rewritten into others; LogSoftmax, ArgMax/ArgMin, TopK -----------------------------------------------

namespace {

std::vector<std::string> ops_of(const Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes) ops.push_back(op_name(n.op));
  return ops;
}

bool has_rewrite(const Graph& g, const std::string& text) {
  return std::any_of(g.rewrites.begin(), g.rewrites.end(), [&](const std::string& r) { return r.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("DepthToSpace SpaceToDepth Tile and InstanceNormalization become ops the backends run", "[nn][passes]") {
  for (const std::string mode : {"DCR", "CRD"}) {
    ModelBuilder m(13);
    m.input("x", {-1, 8, 3, 5}).output("y");
    auto& n = m.node("DepthToSpace", {"x"}, {"y"}, "d2s");
    sluice::nn::test::set_int(n, "blocksize", 2);
    sluice::nn::test::set_string(n, "mode", mode);
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    REQUIRE(ops_of(g) == std::vector<std::string>{"Reshape", "Transpose", "Reshape"});
    CHECK(g.nodes[0].attrs.ints("shape") == (mode == "DCR" ? Ints{2, 2, 2, 2, 3, 5} : Ints{2, 2, 2, 2, 3, 5}));
    CHECK(g.nodes[1].attrs.ints("perm") == (mode == "DCR" ? Ints{0, 3, 4, 1, 5, 2} : Ints{0, 1, 4, 2, 5, 3}));
    CHECK(g.shapes.at("y") == Shape{2, 2, 6, 10});
    CHECK(has_rewrite(g, "node 'd2s' (DepthToSpace) as Reshape, Transpose, Reshape"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {-1, 3, 4, 6}).output("y");
    sluice::nn::test::set_int(m.node("SpaceToDepth", {"x"}, {"y"}), "blocksize", 2);
    const Graph g = prepared(m, 1);
    check_prepared_form(g);
    REQUIRE(ops_of(g) == std::vector<std::string>{"Reshape", "Transpose", "Reshape"});
    CHECK(g.nodes[0].attrs.ints("shape") == Ints{1, 3, 2, 2, 3, 2});
    CHECK(g.nodes[1].attrs.ints("perm") == Ints{0, 3, 5, 1, 2, 4});
    CHECK(g.shapes.at("y") == Shape{1, 12, 2, 3});
  }
  {
    ModelBuilder m(13);
    m.input("x", {-1, 3, 1, 5}).ints("repeats", {1, 2, 4, 1}).output("y");
    m.node("Tile", {"x", "repeats"}, {"y"});
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    REQUIRE(ops_of(g) == std::vector<std::string>{"Reshape", "Mul", "Reshape"});
    CHECK(g.nodes[0].attrs.ints("shape") == Ints{2, 1, 3, 1, 5});  // a new axis before C; H is 1: it broadcasts
    const Tensor& ones = g.constants.at(g.nodes[1].inputs[1]);
    CHECK(ones.shape == Shape{1, 2, 1, 4, 1});
    CHECK(std::all_of(ones.f32.begin(), ones.f32.end(), [](float v) { return v == 1.f; }));
    CHECK(g.shapes.at("y") == Shape{2, 6, 4, 5});
  }
  {  // three repeated dimensions of four would need rank 7: two Tiles, each within the CUDA backend's 6
    ModelBuilder m(13);
    m.input("x", {-1, 3, 4, 5}).ints("repeats", {1, 2, 2, 2}).output("y");
    m.node("Tile", {"x", "repeats"}, {"y"});
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    // (the Reshape after the first Mul and the one before the second are one: collapse_moves.cpp)
    REQUIRE(ops_of(g) == std::vector<std::string>{"Reshape", "Mul", "Reshape", "Mul", "Reshape"});
    for (const auto& n : g.nodes) CHECK(g.shapes.at(n.outputs[0]).size() <= 6);
    CHECK(g.shapes.at("y") == Shape{2, 6, 8, 10});
  }
  {
    ModelBuilder m(13);
    m.input("x", {-1, 3, 4, 4}).weights("s", {3}, {1.f, 2.f, 3.f}).weights("b", {3}, {0.f, 1.f, 2.f}).output("y");
    sluice::nn::test::set_float(m.node("InstanceNormalization", {"x", "s", "b"}, {"y"}), "epsilon", 1e-3f);
    const Graph g = prepared(m, 1);
    check_prepared_form(g);
    REQUIRE(ops_of(g) == std::vector<std::string>{"LayerNormalization", "BatchNormalization"});
    CHECK(g.nodes[0].attrs.i("axis", -1) == 2);
    CHECK(g.nodes[0].attrs.f("epsilon", 0.f) == 1e-3f);
    CHECK(g.nodes[1].attrs.f("epsilon", 1.f) == 0.f);
    CHECK(g.constants.at(g.nodes[1].inputs[3]).f32 == std::vector<float>{0.f, 0.f, 0.f});
    CHECK(g.constants.at(g.nodes[1].inputs[4]).f32 == std::vector<float>{1.f, 1.f, 1.f});
  }
}

TEST_CASE("Expand of run-time data becomes a Mul by ones, or nothing when the shape stays", "[nn][passes]") {
  {
    ModelBuilder m(13);
    m.input("x", {-1, 3, 1}).ints("shape", {1, 3, 4}).output("y");
    m.node("Expand", {"x", "shape"}, {"y"}, "grow");
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    const Node& mul = only_node(g);
    CHECK(mul.op == Op::Mul);
    CHECK(g.constants.at(mul.inputs[1]).shape == Shape{1, 1, 4});  // only the dimension that grows
    CHECK(g.shapes.at("y") == Shape{2, 3, 4});
  }
  {
    ModelBuilder m(13);  // torch's repeat: Expand to ones, then Tile
    m.input("x", {-1, 3}).ints("shape", {1, 1}).output("y");
    m.node("Expand", {"x", "shape"}, {"e"});
    m.node("Relu", {"e"}, {"y"});
    const Graph g = prepared(m, 2);
    CHECK(ops_of(g) == std::vector<std::string>{"Relu"});
    CHECK(g.nodes[0].inputs[0] == "x");
  }
  ModelBuilder m(13);
  m.input("x", {-1, 3}).ints("shape", {2, 4}).output("y");
  m.node("Expand", {"x", "shape"}, {"y"}, "grow");
  const std::string e = error_of([&] { prepared(m, 2); });
  CHECK_THAT(e, Contains("node 'grow' (Expand)"));
  CHECK_THAT(e, Contains("does not broadcast to [2,4]"));
}

TEST_CASE("LogSoftmax ArgMax ArgMin and TopK get their canonical attributes and shapes", "[nn][passes]") {
  auto one = [](std::int64_t opset, const std::string& op, Shape dims, auto&& set) {
    ModelBuilder m(opset);
    m.input("x", dims).output("y");
    std::vector<std::string> inputs{"x"}, outputs{"y"};
    if (op == "TopK") {
      m.ints("k", {2});
      inputs.push_back("k");
      outputs.push_back("i");
      m.output("i");
    }
    set(m.node(op, inputs, outputs));
    return prepared(m, dims[0]);
  };
  auto nothing = [](onnx::NodeProto&) {};
  const Graph legacy = one(11, "LogSoftmax", {2, 3, 4}, nothing);
  CHECK(legacy.nodes.at(0).attrs.i("axis", -1) == 1);
  CHECK(legacy.nodes.at(0).attrs.i("coerce_2d", -1) == 1);
  const Graph modern = one(13, "LogSoftmax", {2, 3, 4}, nothing);
  CHECK(modern.nodes.at(0).attrs.i("axis", -1) == 2);
  CHECK(modern.nodes.at(0).attrs.i("coerce_2d", -1) == 0);

  const Graph arg = one(13, "ArgMin", {2, 3, 4}, [](onnx::NodeProto& n) { sluice::nn::test::set_int(n, "axis", -1); });
  check_prepared_form(arg);
  CHECK(arg.nodes.at(0).attrs.i("axis", -1) == 2);
  CHECK(arg.nodes.at(0).attrs.i("keepdims", -1) == 1);
  CHECK(arg.nodes.at(0).attrs.i("select_last_index", -1) == 0);
  CHECK(arg.shapes.at("y") == Shape{2, 3, 1});
  CHECK(arg.outputs.at(0).type == ElementType::f32);  // indices are data in the prepared form
  const Graph dropped = one(13, "ArgMax", {2, 3, 4}, [](onnx::NodeProto& n) {
    sluice::nn::test::set_int(n, "axis", 1);
    sluice::nn::test::set_int(n, "keepdims", 0);
    sluice::nn::test::set_int(n, "select_last_index", 1);
  });
  CHECK(dropped.nodes.at(0).attrs.i("select_last_index", -1) == 1);
  CHECK(dropped.shapes.at("y") == Shape{2, 4});

  const Graph top = one(13, "TopK", {2, 5, 4}, [](onnx::NodeProto& n) {
    sluice::nn::test::set_int(n, "axis", -2);
    sluice::nn::test::set_int(n, "largest", 0);
  });
  check_prepared_form(top);
  const Node& t = top.nodes.at(0);
  CHECK(t.inputs == std::vector<std::string>{"x"});  // K became an attribute
  CHECK(t.attrs.i("k", -1) == 2);
  CHECK(t.attrs.i("axis", -1) == 1);
  CHECK(t.attrs.i("largest", -1) == 0);
  CHECK(t.attrs.i("sorted", -1) == 1);
  CHECK(top.shapes.at("y") == Shape{2, 2, 4});
  CHECK(top.shapes.at("i") == Shape{2, 2, 4});
}

TEST_CASE("the rewritten and ranking ops refuse what they cannot run, naming the node", "[nn][passes]") {
  auto refusal = [](ModelBuilder& m, std::int64_t batch = 1) { return error_of([&] { prepared(m, batch); }); };
  {
    ModelBuilder m(13);
    m.input("x", {1, 6, 2, 2}).output("y");
    sluice::nn::test::set_int(m.node("DepthToSpace", {"x"}, {"y"}, "d2s"), "blocksize", 2);
    const std::string e = refusal(m);
    CHECK_THAT(e, Contains("node 'd2s' (DepthToSpace)"));
    CHECK_THAT(e, Contains("not divisible by blocksize^2 = 4"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4, 2, 2}).output("y");
    auto& n = m.node("DepthToSpace", {"x"}, {"y"}, "d2s");
    sluice::nn::test::set_int(n, "blocksize", 2);
    sluice::nn::test::set_string(n, "mode", "RDC");
    CHECK_THAT(refusal(m), Contains("mode 'RDC' is not DCR or CRD"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4, 5, 4}).output("y");
    sluice::nn::test::set_int(m.node("SpaceToDepth", {"x"}, {"y"}, "s2d"), "blocksize", 2);
    const std::string e = refusal(m);
    CHECK_THAT(e, Contains("node 's2d' (SpaceToDepth)"));
    CHECK_THAT(e, Contains("not divisible by blocksize 2"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4}).input("r", {1}).output("y");  // a run-time value (of batch 1, as every input here)
    m.node("Tile", {"x", "r"}, {"y"}, "tile");
    const std::string e = refusal(m);
    CHECK_THAT(e, Contains("node 'tile' (Tile)"));
    CHECK_THAT(e, Contains("repeats ('r') must be a constant"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4}).ints("r", {2}).output("y");
    m.node("Tile", {"x", "r"}, {"y"}, "tile");
    CHECK_THAT(refusal(m), Contains("must hold one value per dimension of [1,4]"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4}).ints("r", {1, 0}).output("y");
    m.node("Tile", {"x", "r"}, {"y"}, "tile");
    CHECK_THAT(refusal(m), Contains("make an empty tensor"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4}).ints("k", {5}).output("y").output("i");
    m.node("TopK", {"x", "k"}, {"y", "i"}, "top");
    const std::string e = refusal(m);
    CHECK_THAT(e, Contains("node 'top' (TopK)"));
    CHECK_THAT(e, Contains("K [5] must be one value in [1, 4]"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 4}).input("k", {1}).output("y").output("i");
    m.node("TopK", {"x", "k"}, {"y", "i"}, "top");
    CHECK_THAT(refusal(m), Contains("K ('k') must be a constant"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 3, 4}).input("s", {1}).weights("b", {3}, {0.f, 0.f, 0.f}).output("y");
    m.node("InstanceNormalization", {"x", "s", "b"}, {"y"}, "inorm");
    const std::string e = refusal(m);
    CHECK_THAT(e, Contains("node 'inorm' (InstanceNormalization)"));
    CHECK_THAT(e, Contains("scale ('s') must be a constant"));
  }
  {
    ModelBuilder m(13);
    m.input("x", {1, 3}).weights("s", {3}, {1.f, 1.f, 1.f}).weights("b", {3}, {0.f, 0.f, 0.f}).output("y");
    m.node("InstanceNormalization", {"x", "s", "b"}, {"y"}, "inorm");
    CHECK_THAT(refusal(m), Contains("needs an N,C,spatial... input"));
  }
}

TEST_CASE("the rewritten and ranking ops fold on constants to the values computed by hand", "[nn][passes]") {
  // Each op on a constant, added to the input so that the folded value stays in the graph.
  auto folded = [](ModelBuilder& m, const std::string& value) {
    const Graph g = prepared(m);
    REQUIRE(g.nodes.size() == 1);
    CHECK(g.nodes[0].op == Op::Add);
    return g.constants.at(value);
  };
  {
    ModelBuilder m(13);
    m.weights("c", {1, 4, 1, 1}, {1.f, 2.f, 3.f, 4.f}).input("x", {1, 1, 2, 2}).output("y");
    sluice::nn::test::set_int(m.node("DepthToSpace", {"c"}, {"d"}), "blocksize", 2);
    m.node("Add", {"x", "d"}, {"y"});
    const Tensor t = folded(m, "d");
    CHECK(t.shape == Shape{1, 1, 2, 2});
    CHECK(t.f32 == std::vector<float>{1.f, 2.f, 3.f, 4.f});
  }
  {
    ModelBuilder m(13);
    m.weights("c", {2}, {5.f, 6.f}).ints("r", {3}).input("x", {1, 6}).output("y");
    m.node("Tile", {"c", "r"}, {"t"});
    m.node("Add", {"x", "t"}, {"y"});
    CHECK(folded(m, "t").f32 == std::vector<float>{5.f, 6.f, 5.f, 6.f, 5.f, 6.f});
  }
  {  // integer data (shape arithmetic) tiles as integers
    ModelBuilder m(13);
    m.ints("c", {2}).ints("r", {2}).input("x", {1, 4}).output("y");
    m.node("Tile", {"c", "r"}, {"shape"});
    m.node("Reshape", {"x", "shape"}, {"y"});
    const Graph g = prepared(m);
    CHECK(g.shapes.at("y") == Shape{2, 2});
  }
  {
    ModelBuilder m(13);
    m.weights("c", {2, 3}, {0.f, 3.f, 3.f, 2.f, -1.f, 2.f}).ints("k", {2}).input("x", {1, 2, 2}).output("y");
    m.node("TopK", {"c", "k"}, {"v", "i"});
    sluice::nn::test::set_int(m.node("Cast", {"i"}, {"fi"}), "to", 1);
    m.node("Add", {"v", "fi"}, {"vi"});
    m.node("Add", {"x", "vi"}, {"y"});
    // values 3, 3 | 2, 2 at indices 1, 2 (ties: lower first) | 0, 2
    CHECK(folded(m, "vi").f32 == std::vector<float>{4.f, 5.f, 2.f, 4.f});
  }
  {
    ModelBuilder m(13);
    m.weights("c", {2, 3}, {0.f, 3.f, 3.f, 2.f, -1.f, 2.f}).input("x", {1, 2}).output("y");
    auto& arg = m.node("ArgMax", {"c"}, {"a"});
    sluice::nn::test::set_int(arg, "axis", 1);
    sluice::nn::test::set_int(arg, "keepdims", 0);
    sluice::nn::test::set_int(arg, "select_last_index", 1);
    sluice::nn::test::set_int(m.node("Cast", {"a"}, {"f"}), "to", 1);
    m.node("Add", {"x", "f"}, {"y"});
    CHECK(folded(m, "f").f32 == std::vector<float>{2.f, 2.f});  // the last of each row's ties
  }
  {
    ModelBuilder m(13);
    m.weights("c", {1, 2}, {0.f, std::log(3.f)}).input("x", {1, 2}).output("y");
    m.node("LogSoftmax", {"c"}, {"l"});
    m.node("Add", {"x", "l"}, {"y"});
    const Tensor t = folded(m, "l");
    CHECK(t.f32[0] == Approx(std::log(0.25)).epsilon(1e-6));
    CHECK(t.f32[1] == Approx(std::log(0.75)).epsilon(1e-6));
  }
  {
    ModelBuilder m(13);
    m.weights("c", {1, 2, 2}, {1.f, 3.f, 5.f, 5.f}).weights("s", {2}, {2.f, 1.f}).weights("b", {2}, {0.5f, -1.f});
    m.input("x", {1, 2, 2}).output("y");
    sluice::nn::test::set_float(m.node("InstanceNormalization", {"c", "s", "b"}, {"n"}), "epsilon", 1e-6f);
    m.node("Add", {"x", "n"}, {"y"});
    const Tensor t = folded(m, "n");
    REQUIRE(t.f32.size() == 4);
    CHECK(t.f32[0] == Approx(-1.5));  // (1 - 2) / sqrt(1 + 1e-6) * 2 + 0.5
    CHECK(t.f32[1] == Approx(2.5));
    CHECK(t.f32[2] == Approx(-1.f));  // a constant plane: 0 * 1 - 1
    CHECK(t.f32[3] == Approx(-1.f));
  }
}

TEST_CASE("the fuzz seeds of the rewritten and ranking ops run, or are refused naming the node", "[nn][passes]") {
  const std::string corpus = std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/onnx/";
  const Graph g = prepare(load_onnx(corpus + "rewritten_ranking.onnx"), 2);
  check_prepared_form(g);
  CHECK(g.shapes.at("y") == Shape{2, 4, 2});
  CHECK(g.shapes.at("z") == Shape{2, 8, 4, 1});
  CpuEngine engine(g);
  const std::vector<float> x(2 * 8 * 2 * 2, 0.5f);
  std::vector<float> y(2 * 4 * 2, -1.f), z(2 * 8 * 4, -1.f);
  engine.run({x.data()}, {y.data(), z.data()});
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return v >= 0 && v < 8 && v == std::floor(v); }));
  CHECK(std::all_of(z.begin(), z.end(), [](float v) { return v == 0 || v == 1; }));

  const std::string e = error_of([&] { prepare(load_onnx(corpus + "tile_huge_repeats.onnx"), 1); });
  CHECK_THAT(e, Contains("(Tile)"));
  CHECK_THAT(e, Contains("at most"));
}

// ---- opsets 18-21 ---------------------------------------------------------------------------------------------

namespace {

// x [N, 3, 4, 5] -> one `op` node (named after it) -> y, at `opset`; `extra` adds inputs and attributes.
ModelBuilder one_node(std::int64_t opset, const std::string& op, const std::vector<std::string>& inputs,
                      const std::function<void(ModelBuilder&, onnx::NodeProto&)>& extra = {}) {
  ModelBuilder m(opset);
  m.input("x", {-1, 3, 4, 5}).output("y");
  std::vector<std::string> all{"x"};
  all.insert(all.end(), inputs.begin(), inputs.end());
  auto& n = m.node(op, all, {"y"}, "the_" + op);
  if (extra) extra(m, n);
  return m;
}

}  // namespace

TEST_CASE("opset 18's Reduce axes input, Pad axes, Resize axes and Split num_outputs canonicalize like opset 13's",
          "[nn][passes][opset18]") {
  for (const std::string op : {"ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare",
                               "ReduceProd", "ReduceSum"}) {
    INFO(op);
    const Graph old = prepared(one_node(13, op, op == "ReduceSum" ? std::vector<std::string>{"axes"} : std::vector<std::string>{},
                                        [&](ModelBuilder& m, onnx::NodeProto& n) {
                                          if (op == "ReduceSum") m.ints("axes", {-1, 1});
                                          else test::set_ints(n, "axes", {-1, 1});
                                          test::set_int(n, "keepdims", 0);
                                        }), 2);
    const Graph now = prepared(one_node(18, op, {"axes"}, [](ModelBuilder& m, onnx::NodeProto& n) {
      m.ints("axes", {-1, 1});
      test::set_int(n, "keepdims", 0);
    }), 2);
    check_prepared_form(now);
    CHECK(op_name(only_node(now).op) == op);
    CHECK(only_node(now).attrs.ints("axes") == only_node(old).attrs.ints("axes"));
    CHECK(only_node(now).attrs.ints("axes") == Ints{1, 3});
    CHECK(only_node(now).attrs.i("keepdims", 1) == 0);
    CHECK(now.shapes.at("y") == old.shapes.at("y"));
  }
  {  // no axes, or an empty axes tensor: all of them; with noop_with_empty_axes, a copy
    const Graph all = prepared(one_node(18, "ReduceMax", {}), 1);
    CHECK(only_node(all).attrs.ints("axes") == Ints{0, 1, 2, 3});
    ModelBuilder empty = one_node(18, "ReduceMean", {"axes"}, [](ModelBuilder& m, onnx::NodeProto&) { m.ints("axes", {}); });
    CHECK(only_node(prepared(empty, 1)).attrs.ints("axes") == Ints{0, 1, 2, 3});
    const Graph noop = prepared(one_node(18, "ReduceL2", {}, [](ModelBuilder&, onnx::NodeProto& n) {
      test::set_int(n, "noop_with_empty_axes", 1);
    }), 2);
    CHECK(ops_of(noop) == std::vector<std::string>{"Reshape"});
    CHECK(noop.shapes.at("y") == Shape{2, 3, 4, 5});
  }
  {  // Pad: pads for axes [-1, 2] only (begins, then ends) = opset 13's pads for every axis
    const Graph old = prepared(one_node(13, "Pad", {"pads"}, [](ModelBuilder& m, onnx::NodeProto&) {
      m.ints("pads", {0, 0, 2, 1, 0, 0, 4, 3});
    }), 1);
    const Graph now = prepared(one_node(18, "Pad", {"pads", "", "axes"}, [](ModelBuilder& m, onnx::NodeProto&) {
      m.ints("pads", {1, 2, 3, 4}).ints("axes", {-1, 2});
    }), 1);
    check_prepared_form(now);
    CHECK(only_node(now).attrs.ints("pads") == only_node(old).attrs.ints("pads"));
    CHECK(now.shapes.at("y") == Shape{1, 3, 10, 9});
  }
  {  // Resize: scales or sizes for axes [2, 3] (or [3, 2]) only
    const Graph old = prepared(one_node(13, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto&) {
      m.weights("scales", {4}, {1.f, 1.f, 2.f, 1.5f});
    }), 1);
    const Graph now = prepared(one_node(18, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto& n) {
      m.weights("scales", {2}, {2.f, 1.5f});
      test::set_ints(n, "axes", {2, 3});
    }), 1);
    check_prepared_form(now);
    CHECK(only_node(now).attrs.ints("sizes") == only_node(old).attrs.ints("sizes"));
    CHECK(only_node(now).attrs.floats("scales") == only_node(old).attrs.floats("scales"));
    const Graph sizes = prepared(one_node(18, "Resize", {"", "", "sizes"}, [](ModelBuilder& m, onnx::NodeProto& n) {
      m.ints("sizes", {9, 7});
      test::set_ints(n, "axes", {-1, 2});
      test::set_string(n, "keep_aspect_ratio_policy", "stretch");
    }), 1);
    CHECK(only_node(sizes).attrs.ints("sizes") == Ints{1, 3, 7, 9});
    // antialias changes nothing for nearest or when growing: accepted, the same node as without it
    for (const std::string mode : {"nearest", "linear"}) {
      const Graph grown = prepared(one_node(18, "Resize", {"", "", "sizes"}, [&](ModelBuilder& m, onnx::NodeProto& n) {
        m.ints("sizes", {1, 3, mode == "nearest" ? 2 : 8, 10});
        test::set_string(n, "mode", mode);
        test::set_int(n, "antialias", 1);
      }), 1);
      CHECK(only_node(grown).attrs.s("mode", "") == mode);
    }
  }
  {  // Split: num_outputs parts of ceil(dim / n), the last one smaller
    ModelBuilder even(18), uneven(18);
    even.input("x", {-1, 6}).output("a").output("b").output("c");
    uneven.input("x", {-1, 7}).output("a").output("b").output("c");
    for (ModelBuilder* m : {&even, &uneven}) {
      auto& s = m->node("Split", {"x"}, {"a", "b", "c"});
      test::set_int(s, "axis", 1);
      test::set_int(s, "num_outputs", 3);
    }
    CHECK(only_node(prepared(even, 1)).attrs.ints("split") == Ints{2, 2, 2});
    const Graph g = prepared(uneven, 2);
    CHECK(only_node(g).attrs.ints("split") == Ints{3, 3, 1});
    CHECK(g.shapes.at("c") == Shape{2, 1});
  }
}

TEST_CASE("opset 18-21 forms that do not run are refused naming the node and attribute", "[nn][passes][opset18]") {
  auto error = [](std::int64_t opset, const std::string& op, const std::vector<std::string>& inputs,
                  const std::function<void(ModelBuilder&, onnx::NodeProto&)>& extra) {
    return error_of([&] { prepared(one_node(opset, op, inputs, extra), 1); });
  };
  // Resize-18: antialias where it widens the filter; a keep_aspect_ratio_policy other than stretch
  std::string e = error(18, "Resize", {"", "", "sizes"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.ints("sizes", {1, 3, 2, 5});
    test::set_string(n, "mode", "linear");
    test::set_int(n, "antialias", 1);
  });
  CHECK_THAT(e, Contains("node 'the_Resize' (Resize): antialias=1 is not supported when it shrinks the image"));
  for (const std::string policy : {"not_larger", "not_smaller"}) {
    e = error(18, "Resize", {"", "", "sizes"}, [&](ModelBuilder& m, onnx::NodeProto& n) {
      m.ints("sizes", {8, 10});
      test::set_ints(n, "axes", {2, 3});
      test::set_string(n, "keep_aspect_ratio_policy", policy);
    });
    CHECK_THAT(e, Contains("node 'the_Resize' (Resize): keep_aspect_ratio_policy '" + policy + "' is not supported"));
  }
  e = error(18, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.weights("scales", {3}, {2.f, 2.f, 2.f});
    test::set_ints(n, "axes", {1, 2, 3});
  });
  CHECK_THAT(e, Contains("only H and W may be resized"));
  e = error(18, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.weights("scales", {2}, {2.f, 2.f});
    test::set_ints(n, "axes", {2, -2});
  });
  CHECK_THAT(e, Contains("node 'the_Resize' (Resize): axes [2,2] repeat an axis"));
  e = error(18, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.weights("scales", {4}, {1.f, 1.f, 2.f, 2.f});
    test::set_ints(n, "axes", {2, 3});
  });
  CHECK_THAT(e, Contains("scales holds 4 values; axes [2,3] need 2"));
  // Resize-19's half_pixel_symmetric, Pad-19's wrap, AveragePool-19's dilations
  e = error(19, "Resize", {"", "scales"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.weights("scales", {4}, {1.f, 1.f, 2.f, 2.f});
    test::set_string(n, "coordinate_transformation_mode", "half_pixel_symmetric");
  });
  CHECK_THAT(e, Contains("coordinate_transformation_mode 'half_pixel_symmetric' is not supported"));
  e = error(19, "Pad", {"pads"}, [](ModelBuilder& m, onnx::NodeProto& n) {
    m.ints("pads", {0, 0, 1, 1, 0, 0, 1, 1});
    test::set_string(n, "mode", "wrap");
  });
  CHECK_THAT(e, Contains("node 'the_Pad' (Pad): mode 'wrap' is not supported"));
  e = error(18, "Pad", {"pads", "", "axes"}, [](ModelBuilder& m, onnx::NodeProto&) { m.ints("pads", {1, 1}).ints("axes", {2, 3}); });
  CHECK_THAT(e, Contains("node 'the_Pad' (Pad): pads [1,1] holds 2 values; axes [2,3] need 4"));
  e = error(19, "AveragePool", {}, [](ModelBuilder&, onnx::NodeProto& n) {
    test::set_ints(n, "kernel_shape", {2, 2});
    test::set_ints(n, "dilations", {2, 2});
  });
  CHECK_THAT(e, Contains("node 'the_AveragePool' (AveragePool): attribute dilations [2,2] is not supported for AveragePool"));
  CHECK(error(19, "AveragePool", {}, [](ModelBuilder&, onnx::NodeProto& n) {
          test::set_ints(n, "kernel_shape", {2, 2});
          test::set_ints(n, "dilations", {1, 1});
        }) == "(no error)");
  // Split-18's num_outputs: one per output, not with the split input, no empty part
  auto split_error = [](std::int64_t dim, std::int64_t outputs, std::int64_t num_outputs, bool sizes) {
    ModelBuilder m(18);
    m.input("x", {-1, dim}).ints("sizes", {dim - 1, 1});
    std::vector<std::string> outs;
    for (std::int64_t i = 0; i < outputs; ++i) {
      outs.push_back("o" + std::to_string(i));
      m.output(outs.back());
    }
    auto& s = m.node("Split", sizes ? std::vector<std::string>{"x", "sizes"} : std::vector<std::string>{"x"}, outs, "split");
    test::set_int(s, "axis", 1);
    test::set_int(s, "num_outputs", num_outputs);
    return error_of([&] { prepared(m, 1); });
  };
  CHECK_THAT(split_error(6, 2, 3, false), Contains("node 'split' (Split): num_outputs 3 differs from its 2 outputs"));
  CHECK_THAT(split_error(6, 2, 2, true), Contains("node 'split' (Split): takes split sizes or attribute num_outputs, not both"));
  CHECK_THAT(split_error(4, 3, 3, false), Contains("node 'split' (Split): num_outputs 3 leaves an empty last part"));
  // ScatterND: a reduction outside none/add/mul/max/min; Cast-19 to float8
  {
    ModelBuilder m(18);
    m.input("x", {-1, 2}).output("y").weights("data", {2}, {1, 2}).weights("updates", {1}, {5}).ints("idx", {1});
    auto& idx = m.proto().mutable_graph()->mutable_initializer()->at(2);
    idx.clear_dims();
    idx.add_dims(1);
    idx.add_dims(1);
    test::set_string(m.node("ScatterND", {"data", "idx", "updates"}, {"s"}, "scatter"), "reduction", "mean");
    m.node("Add", {"x", "s"}, {"y"});
    CHECK_THAT(error_of([&] { prepared(m, 1); }), Contains("node 'scatter' (ScatterND): reduction 'mean' is not supported"));
  }
  {
    ModelBuilder m(19);
    m.input("x", {-1, 2}).output("y").weights("c", {2}, {1, 2});
    test::set_int(m.node("Cast", {"c"}, {"f8"}, "to_float8"), "to", 17);  // FLOAT8E4M3FN
    m.node("Add", {"x", "f8"}, {"y"});
    CHECK_THAT(error_of([&] { prepared(m, 1); }), Contains("node 'to_float8' (Cast): cast to data type 17 is not supported"));
  }
}

TEST_CASE("ScatterND-18 folds with reduction max and min", "[nn][passes][opset18]") {
  for (const std::string reduction : {"max", "min"}) {
    ModelBuilder m(18);
    m.input("x", {-1, 3}).output("y").weights("data", {3}, {1, 5, 3}).weights("updates", {2}, {4, 4}).ints("idx", {0, 1});
    auto& idx = m.proto().mutable_graph()->mutable_initializer()->at(2);
    idx.clear_dims();
    idx.add_dims(2);
    idx.add_dims(1);
    test::set_string(m.node("ScatterND", {"data", "idx", "updates"}, {"s"}), "reduction", reduction);
    m.node("Add", {"x", "s"}, {"y"});
    INFO(reduction);
    CHECK(prepared(m, 1).constants.at(only_node(prepared(m, 1)).inputs[1]).f32 ==
          (reduction == "max" ? std::vector<float>{4, 5, 3} : std::vector<float>{1, 4, 3}));
  }
}

TEST_CASE("GroupNormalization becomes Reshape, LayerNormalization, Reshape and a per-channel BatchNormalization",
          "[nn][passes][opset18]") {
  for (const std::int64_t opset : {18, 21}) {
    INFO("opset " << opset);
    ModelBuilder m(opset);
    m.input("x", {-1, 6, 4, 5}).output("y");
    if (opset == 18) m.weights("s", {3}, {1.f, 2.f, 3.f}).weights("b", {3}, {0.f, 1.f, 2.f});
    else m.weights("s", {6}, {1.f, 1.f, 2.f, 2.f, 3.f, 3.f}).weights("b", {6}, {0.f, 0.f, 1.f, 1.f, 2.f, 2.f});
    auto& n = m.node("GroupNormalization", {"x", "s", "b"}, {"y"}, "gnorm");
    test::set_int(n, "num_groups", 3);
    test::set_float(n, "epsilon", 1e-3f);
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    REQUIRE(ops_of(g) == std::vector<std::string>{"Reshape", "LayerNormalization", "Reshape", "BatchNormalization"});
    CHECK(g.nodes[0].attrs.ints("shape") == Ints{2, 3, 40});
    CHECK(g.nodes[1].attrs.i("axis", -1) == 2);
    CHECK(g.nodes[1].attrs.f("epsilon", 0.f) == 1e-3f);
    CHECK(g.nodes[2].attrs.ints("shape") == Ints{2, 6, 4, 5});
    CHECK(g.nodes[3].attrs.f("epsilon", 1.f) == 0.f);
    // per channel in the end, whichever the opset gave
    CHECK(g.constants.at(g.nodes[3].inputs[1]).f32 == std::vector<float>{1.f, 1.f, 2.f, 2.f, 3.f, 3.f});
    CHECK(g.constants.at(g.nodes[3].inputs[2]).f32 == std::vector<float>{0.f, 0.f, 1.f, 1.f, 2.f, 2.f});
    CHECK(g.shapes.at("y") == Shape{2, 6, 4, 5});
    CHECK(has_rewrite(g, "node 'gnorm' (GroupNormalization) as Reshape, LayerNormalization, Reshape, BatchNormalization"));
  }
}

TEST_CASE("GroupNormalization outside what runs is refused naming the node", "[nn][passes][opset18]") {
  auto error = [](std::int64_t opset, std::int64_t params, const std::function<void(onnx::NodeProto&)>& attrs,
                  bool constant = true) {
    ModelBuilder m(opset);
    m.input("x", {-1, 6, 4, 5}).output("y");
    if (constant) m.weights("s", {params}, std::vector<float>(static_cast<std::size_t>(params), 1.f));
    else m.input("s", {-1});  // run-time data (its first axis the batch)
    m.weights("b", {params}, std::vector<float>(static_cast<std::size_t>(params), 0.f));
    auto& n = m.node("GroupNormalization", {"x", "s", "b"}, {"y"}, "gnorm");
    attrs(n);
    return error_of([&] { prepared(m, 1); });
  };
  auto groups = [](std::int64_t g) { return [g](onnx::NodeProto& n) { test::set_int(n, "num_groups", g); }; };
  CHECK(error(18, 3, groups(3)) == "(no error)");
  CHECK(error(21, 6, groups(3)) == "(no error)");
  CHECK_THAT(error(18, 6, groups(3)), Contains("node 'gnorm' (GroupNormalization): scale [6] must hold one floating point value per group (opsets 18-20) (3)"));
  CHECK_THAT(error(20, 6, groups(3)), Contains("per group (opsets 18-20) (3)"));
  CHECK_THAT(error(21, 3, groups(3)), Contains("node 'gnorm' (GroupNormalization): scale [3] must hold one floating point value per channel (opset 21) (6)"));
  CHECK_THAT(error(18, 4, groups(4)), Contains("node 'gnorm' (GroupNormalization): num_groups 4 does not divide the 6 channels"));
  CHECK_THAT(error(18, 3, [](onnx::NodeProto&) {}), Contains("node 'gnorm' (GroupNormalization): needs attribute num_groups"));
  CHECK_THAT(error(21, 6, [](onnx::NodeProto& n) {
               test::set_int(n, "num_groups", 3);
               test::set_int(n, "stash_type", 10);
             }),
             Contains("node 'gnorm' (GroupNormalization): stash_type 10 is not supported (only 1"));
  CHECK_THAT(error(18, 3, groups(3), false), Contains("node 'gnorm' (GroupNormalization): scale ('s') must be a constant"));
}

TEST_CASE("the opset 18 and 21 fuzz seeds run, or are refused naming the node", "[nn][passes][opset18]") {
  const std::string corpus = std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/onnx/";
  const Graph g = prepare(load_onnx(corpus + "opset18.onnx"), 2);
  check_prepared_form(g);
  CHECK(g.shapes.at("y") == Shape{2, 4, 8, 2});
  CHECK(g.shapes.at("r") == Shape{2, 4, 4, 1});
  CpuEngine engine(g);
  const std::vector<float> x = random_values(2 * 4 * 4 * 4, 5);
  std::vector<float> y(2 * 4 * 8 * 2, std::nanf("")), r(2 * 4 * 4, std::nanf(""));
  engine.run({x.data()}, {y.data(), r.data()});
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
  CHECK(std::all_of(r.begin(), r.end(), [](float v) { return std::isfinite(v); }));

  const Graph gn = prepare(load_onnx(corpus + "opset21_group_norm.onnx"), 1);
  check_prepared_form(gn);
  CHECK(gn.shapes.at("y") == Shape{1, 4, 3});

  CHECK_THAT(error_of([&] { prepare(load_onnx(corpus + "opset18_antialias_shrink.onnx"), 1); }),
             Contains("(Resize): antialias=1 is not supported when it shrinks the image"));
}

TEST_CASE("a Pad of nothing and a Slice of everything are removed and other Pads and Slices kept", "[nn][passes]") {
  ModelBuilder m(17);
  m.input("x", {-1, 4, 6}).output("y").output("z");
  m.ints("no_pads", {0, 0, 0, 0, 0, 0}).ints("pads", {0, 1, 0, 0, 0, 0});  // one row before
  m.ints("zero", {0, 0}).ints("big", {std::numeric_limits<std::int64_t>::max(), 6}).ints("axes", {0, 2});
  m.ints("z1", {0}).ints("four", {4}).ints("one", {1}).ints("rows", {3});
  m.node("Relu", {"x"}, {"r"});
  test::set_string(m.node("Pad", {"r", "no_pads"}, {"p"}, "pad_nothing"), "mode", "reflect");
  m.node("Slice", {"p", "zero", "big", "axes"}, {"s"}, "slice_all");  // batch to the end, dim 2 whole
  m.node("Slice", {"s", "z1", "four", "one"}, {"s2"}, "slice_all_rows");  // x[:, :4]: every row
  m.node("Pad", {"s2", "pads"}, {"padded"}, "pad_one");
  m.node("Tanh", {"padded"}, {"t"});
  m.node("Slice", {"t", "z1", "rows", "one"}, {"y"}, "slice_some");
  m.node("Sigmoid", {"s2"}, {"q"});
  m.node("Slice", {"q", "z1", "four", "one"}, {"z"}, "slice_output");  // a graph output: its producer renamed
  for (const std::int64_t batch : {1, 3}) {
    const Graph g = prepared(m, batch);
    check_prepared_form(g);
    CHECK(ops_of(g) == std::vector<std::string>{"Relu", "Pad", "Tanh", "Slice", "Sigmoid"});
    CHECK(g.nodes[1].inputs[0] == g.nodes[0].outputs[0]);  // the kept Pad reads the Relu
    CHECK(g.nodes[4].inputs[0] == g.nodes[0].outputs[0]);
    CHECK(g.nodes[4].outputs[0] == "z");
    CHECK(g.shapes.at("z") == Shape{batch, 4, 6});
    for (const char* removed : {"'pad_nothing' (Pad)", "'slice_all' (Slice)", "'slice_all_rows' (Slice)", "'slice_output' (Slice)"})
      CHECK(has_rewrite(g, std::string("removed node ") + removed));
    // The same values as with the copies (kept when they are all that makes a graph output).
    const auto x = random_values(static_cast<std::size_t>(batch * 24), 7);
    std::vector<float> y(static_cast<std::size_t>(batch * 3 * 6)), z(static_cast<std::size_t>(batch * 24));
    CpuEngine(g).run({x.data()}, {y.data(), z.data()});
    for (std::size_t i = 0; i < z.size(); ++i) CHECK(z[i] == Approx(1 / (1 + std::exp(-std::max(x[i], 0.f)))));
    for (std::int64_t b = 0; b < batch; ++b)
      for (std::int64_t i = 0; i < 18; ++i) {
        const std::int64_t row = i / 6, at = b * 18 + i;
        const float want = row == 0 ? 0.f : std::tanh(std::max(x[static_cast<std::size_t>(b * 24 + (row - 1) * 6 + i % 6)], 0.f));
        CHECK(y[static_cast<std::size_t>(at)] == Approx(want));
      }
  }
  // A Pad of nothing or Slice of everything that is all a graph output is and reads a graph input stays a copy.
  ModelBuilder copy(17);
  copy.input("x", {-1, 4}).output("y").ints("no_pads", {0, 0, 0, 0});
  copy.node("Pad", {"x", "no_pads"}, {"y"});
  CHECK(ops_of(prepared(copy, 2)) == std::vector<std::string>{"Pad"});
}

namespace {
// Swin's shifted-window attention as torchvision exports it: scores [B*4, 2, 5, 5] (+ M1, the position bias)
// -> Reshape [B, 4, 2, 5, 5] -> Add M2 (a mask per window) -> Reshape [B*4, 2, 5, 5] -> Softmax -> MatMul.
ModelBuilder shifted_window_attention(bool position_bias, const Shape& mask_shape, const Shape& m1_shape = {2, 5, 5}) {
  ModelBuilder m(17);
  m.input("x", {-1, 4, 2, 5, 8}).output("y");
  m.ints("merged", {-1, 2, 5, 8}).ints("split", {-1, 4, 2, 5, 5}).ints("scores", {-1, 2, 5, 5});
  m.weights("scale", {}, {0.35f}).weights("m1", m1_shape, random_values(static_cast<std::size_t>(element_count(m1_shape)), 60));
  std::vector<float> mask = random_values(static_cast<std::size_t>(element_count(mask_shape)), 61);
  for (std::size_t i = 0; i < mask.size(); i += 3) mask[i] = -100.f;
  m.weights("m2", mask_shape, mask);
  m.node("Relu", {"x"}, {"qx"});
  m.node("Sigmoid", {"x"}, {"kx"});
  m.node("Tanh", {"x"}, {"vx"});
  m.node("Reshape", {"qx", "merged"}, {"q"});
  m.node("Reshape", {"kx", "merged"}, {"k"});
  m.node("Reshape", {"vx", "merged"}, {"v"});
  m.node("Mul", {"q", "scale"}, {"qs"});
  test::set_ints(m.node("Transpose", {"k"}, {"kt"}), "perm", {0, 1, 3, 2});
  m.node("MatMul", {"qs", "kt"}, {"s"});
  std::string s = "s";
  if (position_bias) {
    m.node("Add", {"s", "m1"}, {"biased"});
    s = "biased";
  }
  m.node("Reshape", {s, "split"}, {"windows"});
  m.node("Add", {"windows", "m2"}, {"masked"});
  m.node("Reshape", {"masked", "scores"}, {"z"});
  test::set_int(m.node("Softmax", {"z"}, {"probs"}), "axis", -1);
  m.node("MatMul", {"probs", "v"}, {"y"});
  return m;
}
}  // namespace

TEST_CASE("Swin's shifted-window mask between batch Reshapes fuses into one Attention with one bias", "[nn][passes][attention]") {
  for (const bool position_bias : {false, true})
    for (const Shape& mask_shape : {Shape{4, 1, 5, 5}, Shape{1, 4, 1, 5, 5}, Shape{4, 2, 5, 5}}) {
      INFO("position bias " << position_bias << " mask " << to_string(mask_shape));
      const std::int64_t batch = 3;
      const ModelBuilder m = shifted_window_attention(position_bias, mask_shape);
      const Graph fused = prepared(m, batch);
      check_prepared_form(fused);
      CHECK(count_op(fused, "Softmax") == 0);
      CHECK(count_op(fused, "Add") == 0);
      CHECK(count_op(fused, "MatMul") == 0);
      CHECK(count_op(fused, "Mul") == 0);
      CHECK(count_op(fused, "Transpose") == 0);
      const Node& a = attention_of(fused);
      CHECK(a.attrs.f("scale", 0.f) == Approx(0.35f));
      CHECK(fused.shape_of(a.inputs[0]) == Shape{batch, 4, 2, 5, 8});  // the batch split again, a view
      CHECK(fused.shape_of(a.outputs[0]) == Shape{batch, 4, 2, 5, 8});
      REQUIRE(fused.is_constant(a.inputs[3]));
      CHECK(fused.constants.at(a.inputs[3]).shape == Shape{4, position_bias ? 2 : mask_shape[mask_shape.size() - 3], 5, 5});
      CHECK(fused.outputs[0].name == "y");
      CHECK(fused.shapes.at("y") == Shape{batch * 4, 2, 5, 8});
      // The reference: the same graph with the probabilities also read, which blocks the fusion.
      ModelBuilder plain = shifted_window_attention(position_bias, mask_shape);
      plain.output("probs");
      const Graph unfused = prepared(plain, batch);
      CHECK(count_op(unfused, "Attention") == 0);
      const auto x = random_values(static_cast<std::size_t>(batch * 4 * 2 * 5 * 8), 62, -2.f, 2.f);
      std::vector<float> got(x.size()), want(x.size()), probs(static_cast<std::size_t>(batch * 4 * 2 * 5 * 5));
      CpuEngine(fused).run({x.data()}, {got.data()});
      CpuEngine(unfused).run({x.data()}, {want.data(), probs.data()});
      for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-5));
    }
  // A position bias that differs along the merged batch is left alone.
  CHECK(count_op(prepared(shifted_window_attention(true, {4, 1, 5, 5}, {8, 2, 5, 5}), 2), "Attention") == 0);
}

TEST_CASE("Einsum is lowered into MatMul, Mul, ReduceSum and moves, and refused for what does not lower", "[nn][passes][einsum]") {
  {  // attention's scores: the key operand transposed, one batched MatMul, nothing else
    ModelBuilder m(17);
    m.input("q", {-1, 4, 9, 16}).input("k", {-1, 4, 11, 16}).output("y");
    test::set_string(m.node("Einsum", {"q", "k"}, {"y"}), "equation", "bhqd,bhkd->bhqk");
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Einsum") == 0);
    CHECK(count_op(g, "MatMul") == 1);
    CHECK(count_op(g, "Transpose") == 1);
    CHECK(g.shapes.at("y") == Shape{2, 4, 9, 11});
  }
  {  // an outer product multiplies, a lone index is summed away first
    ModelBuilder m(17);
    m.input("a", {-1, 5, 3}).input("b", {-1, 7}).output("y");
    test::set_string(m.node("Einsum", {"a", "b"}, {"y"}), "equation", "nij,nk->nik");
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Mul") == 1);
    CHECK(count_op(g, "ReduceSum") == 1);
    CHECK(count_op(g, "MatMul") == 0);
    CHECK(g.shapes.at("y") == Shape{2, 5, 7});
  }
  {  // a product by weights becomes a Linear
    ModelBuilder m(17);
    m.input("x", {-1, 6, 8}).weights("w", {8, 5}, random_values(40, 1)).output("y");
    test::set_string(m.node("Einsum", {"x", "w"}, {"y"}), "equation", "bsd,de->bse");
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Linear") == 1);
  }
  ModelBuilder m(17);
  m.input("x", {-1, 3, 3}).output("y");
  test::set_string(m.node("Einsum", {"x"}, {"y"}, "diag"), "equation", "bii->bi");
  CHECK_THAT(error_of([&] { prepared(m, 1); }),
             Contains("node 'diag' (Einsum): equation 'bii->bi': index i repeats in input 0 (a diagonal), which is not supported"));
}

TEST_CASE("Attention written as two Einsums around a Softmax fuses into one Attention",
          "[nn][passes][einsum][attention]") {
  struct Form {
    std::string scores, output;
    Shape q, k;
  };
  for (const Form& f : {Form{"bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd", {-1, 4, 9, 16}, {-1, 4, 11, 16}},
                        Form{"B G H I D, B G H J D -> B G H I J", "B G H I J, B G H J D -> B G H I D",  // MaxViT's
                             {-1, 3, 2, 7, 16}, {-1, 3, 2, 5, 16}}}) {
    INFO(f.scores);
    ModelBuilder m(17);
    m.input("q", f.q).input("k", f.k).input("v", f.k).output("y");
    test::set_string(m.node("Einsum", {"q", "k"}, {"s"}), "equation", f.scores);
    test::set_int(m.node("Softmax", {"s"}, {"p"}), "axis", -1);
    test::set_string(m.node("Einsum", {"p", "v"}, {"y"}), "equation", f.output);
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    CHECK(count_op(g, "Attention") == 1);
    CHECK(g.nodes.size() == 1);
  }
}

TEST_CASE("GatherElements has a non-negative axis, f32 constant indices and refuses indices longer than data",
          "[nn][passes][gather_elements]") {
  {
    ModelBuilder m(17);
    m.input("x", {-1, 5, 4}).input("i", {-1, 3, 4}).output("y");
    test::set_int(m.node("GatherElements", {"x", "i"}, {"y"}), "axis", -2);
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    const Node& n = only_node(g);
    CHECK(n.attrs.i("axis", -1) == 1);
    CHECK(g.shapes.at("y") == Shape{2, 3, 4});
  }
  {  // constant int64 indices become f32 numbers; indices longer than data refused
    ModelBuilder m(17);
    m.input("x", {-1, 5}).ints("i", {4, -1, 0}).output("y");
    m.node("Unsqueeze", {"i", "zero"}, {"i2"});
    m.ints("zero", {0});
    test::set_int(m.node("GatherElements", {"x", "i2"}, {"y"}), "axis", 1);
    const Graph g = prepared(m, 1);
    check_prepared_form(g);
    const Node& n = only_node(g);
    REQUIRE(g.is_constant(n.inputs[1]));
    CHECK(g.constants.at(n.inputs[1]).f32 == std::vector<float>{4, -1, 0});
    ModelBuilder longer(17);
    longer.input("x", {-1, 2, 5}).input("i", {-1, 3, 5}).output("y");
    test::set_int(longer.node("GatherElements", {"x", "i"}, {"y"}, "g"), "axis", 2);
    CHECK_THAT(error_of([&] { prepared(longer, 1); }),
               Contains("node 'g' (GatherElements): indices [1,3,5] are longer than data [1,2,5] in dimension 1"));
  }
}

TEST_CASE("GridSample has its defaults written out, opset 20's linear as bilinear, and refuses other paddings",
          "[nn][passes][grid_sample]") {
  for (const std::int64_t opset : {16, 20}) {
    ModelBuilder m(opset);
    m.input("x", {-1, 3, 6, 6}).input("grid", {-1, 4, 5, 2}).output("y");
    auto& n = m.node("GridSample", {"x", "grid"}, {"y"});
    if (opset == 20) test::set_string(n, "mode", "linear");
    const Graph g = prepared(m, 2);
    check_prepared_form(g);
    const Node& s = only_node(g);
    CHECK(s.attrs.s("mode", "") == "bilinear");
    CHECK(s.attrs.s("padding_mode", "") == "zeros");
    CHECK(s.attrs.i("align_corners", -1) == 0);
    CHECK(g.shapes.at("y") == Shape{2, 3, 4, 5});
  }
  ModelBuilder m(16);
  m.input("x", {-1, 3, 6, 6}).input("grid", {-1, 4, 5, 2}).output("y");
  test::set_string(m.node("GridSample", {"x", "grid"}, {"y"}, "gs"), "padding_mode", "wrap");
  CHECK_THAT(error_of([&] { prepared(m, 1); }),
             Contains("node 'gs' (GridSample): padding_mode 'wrap' is not zeros, border or reflection"));
}

TEST_CASE("the issue 31 fuzz seeds run, or are refused naming the node", "[nn][passes][einsum]") {
  const std::string corpus = std::string(SLUICE_SOURCE_DIR) + "/fuzz/corpus/onnx/";
  const Graph g = prepare(load_onnx(corpus + "detr_ops.onnx"), 2);
  check_prepared_form(g);
  CHECK(g.shapes.at("y") == Shape{2, 4, 2});
  CpuEngine engine(g);
  const std::vector<float> x = random_values(2 * 4 * 6 * 6, 7), grid = random_values(2 * 3 * 3 * 2, 8, -1.2f, 1.2f);
  std::vector<float> y(2 * 4 * 2, std::nanf(""));
  engine.run({x.data(), grid.data()}, {y.data()});
  CHECK(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
  CHECK_THAT(error_of([&] { prepare(load_onnx(corpus + "einsum_diagonal.onnx"), 1); }),
             Contains("(Einsum): equation 'b...ii->b...i': index i repeats in input 0 (a diagonal)"));
}
