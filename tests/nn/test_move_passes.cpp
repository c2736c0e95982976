// Passes that change how data is moved, not what is computed: patchify.cpp (a Conv whose kernel tiles its input
// becomes a product of its patches) and collapse_moves.cpp (chains of Reshape/Transpose become one move). Each
// result is checked against the graph left as written (an extra graph output blocks a rewrite) on random data.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "nn/cpu/engine.hpp"
#include "nn/passes.hpp"
#include "tests/nn/model_builder.hpp"

using namespace sluice::nn;
using sluice::nn::test::ModelBuilder;
using Ints = std::vector<std::int64_t>;

namespace {

std::size_t count_op(const Graph& g, Op op) {
  return static_cast<std::size_t>(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; }));
}

std::vector<float> random_values(std::size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Conv with strides == kernel [kh, kw], its pads and group, on x [n, c, h, w], weights [o, c / group, kh, kw].
ModelBuilder tiling_conv(const Shape& x, std::int64_t o, std::int64_t kh, std::int64_t kw, const Ints& strides,
                         const Ints& pads, std::int64_t group) {
  ModelBuilder m(13);
  m.input("x", x).output("y");
  const std::int64_t c = x[1] / group;
  m.weights("w", {o, c, kh, kw}, random_values(static_cast<std::size_t>(o * c * kh * kw), 7));
  m.weights("b", {o}, random_values(static_cast<std::size_t>(o), 8));
  auto& conv = m.node("Conv", {"x", "w", "b"}, {"y"});
  test::set_ints(conv, "strides", strides);
  test::set_ints(conv, "pads", pads);
  test::set_int(conv, "group", group);
  return m;
}

// Direct strided convolution without padding: the reference.
std::vector<float> patch_conv(const std::vector<float>& x, const Shape& xs, const std::vector<float>& w, const Shape& ws,
                              const std::vector<float>& b) {
  const std::int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], o = ws[0], kh = ws[2], kw = ws[3];
  const std::int64_t oh = h / kh, ow = wd / kw;
  std::vector<float> y(static_cast<std::size_t>(n * o * oh * ow));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t m = 0; m < o; ++m)
      for (std::int64_t r = 0; r < oh; ++r)
        for (std::int64_t q = 0; q < ow; ++q) {
          double sum = b[static_cast<std::size_t>(m)];
          for (std::int64_t ch = 0; ch < c; ++ch)
            for (std::int64_t u = 0; u < kh; ++u)
              for (std::int64_t v = 0; v < kw; ++v)
                sum += static_cast<double>(x[static_cast<std::size_t>(((i * c + ch) * h + r * kh + u) * wd + q * kw + v)]) *
                       w[static_cast<std::size_t>(((m * c + ch) * kh + u) * kw + v)];
          y[static_cast<std::size_t>(((i * o + m) * oh + r) * ow + q)] = static_cast<float>(sum);
        }
  return y;
}

}  // namespace

TEST_CASE("a Conv whose kernel tiles its input becomes a product of its patches", "[nn][passes][patchify]") {
  const Shape xs{3, 5, 8, 12};
  const Graph g = prepare(tiling_conv(xs, 7, 4, 3, {4, 3}, {0, 0, 0, 0}, 1).load(), 3);
  CHECK(count_op(g, Op::Conv) == 0);
  CHECK(count_op(g, Op::Linear) == 1);
  CHECK(std::any_of(g.rewrites.begin(), g.rewrites.end(), [](const std::string& r) { return r.find("4x3 patches") != std::string::npos; }));
  const auto x = random_values(static_cast<std::size_t>(element_count(xs)), 9);
  std::vector<float> got(3 * 7 * 2 * 4);
  CpuEngine(g).run({x.data()}, {got.data()});
  const auto want = patch_conv(x, xs, random_values(7 * 5 * 4 * 3, 7), {7, 5, 4, 3}, random_values(7, 8));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-5f);
}

TEST_CASE("a tiling Conv on channels-last data turned NCHW gathers patches channels-last", "[nn][passes][patchify]") {
  // ConvNeXt's downsampling: LayerNorm over C of [N, H, W, C], Transpose to NCHW, Conv 2x2 stride 2.
  ModelBuilder m(13);
  const Shape hwc{2, 6, 4, 5};
  m.input("x", hwc).output("y");
  m.weights("w", {3, 5, 2, 2}, random_values(3 * 5 * 2 * 2, 7));
  m.weights("b", {3}, random_values(3, 8));
  m.node("Relu", {"x"}, {"r"});
  test::set_ints(m.node("Transpose", {"r"}, {"nchw"}), "perm", {0, 3, 1, 2});
  auto& conv = m.node("Conv", {"nchw", "w", "b"}, {"y"});
  test::set_ints(conv, "strides", {2, 2});
  const Graph g = prepare(m.load(), 2);
  CHECK(count_op(g, Op::Conv) == 0);
  REQUIRE(count_op(g, Op::Transpose) == 2);  // the patches' one move, and the way back to NCHW
  const auto move = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Transpose; });
  const Ints perm = move->attrs.ints("perm");
  CHECK(perm.back() == static_cast<std::int64_t>(perm.size()) - 1);  // C stays innermost: rows of C move whole
  const auto x = random_values(static_cast<std::size_t>(element_count(hwc)), 9);
  std::vector<float> got(2 * 3 * 3 * 2);
  CpuEngine(g).run({x.data()}, {got.data()});
  std::vector<float> nchw(x.size());
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t y = 0; y < 6; ++y)
      for (std::int64_t q = 0; q < 4; ++q)
        for (std::int64_t c = 0; c < 5; ++c)
          nchw[static_cast<std::size_t>(((i * 5 + c) * 6 + y) * 4 + q)] = std::max(0.f, x[static_cast<std::size_t>(((i * 6 + y) * 4 + q) * 5 + c)]);
  const auto want = patch_conv(nchw, {2, 5, 6, 4}, random_values(3 * 5 * 2 * 2, 7), {3, 5, 2, 2}, random_values(3, 8));
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-5f);
}

TEST_CASE("two tiling Convs with one node name give values of their own", "[nn][passes][patchify]") {
  // Node names in a file may repeat; the names the rewrite makes from them must not.
  ModelBuilder m(13);
  m.input("x", {1, 2, 4, 4}).output("y");
  m.weights("w1", {2, 2, 2, 2}, random_values(16, 11)).weights("w2", {3, 2, 2, 2}, random_values(24, 12));
  test::set_ints(m.node("Conv", {"x", "w1"}, {"h"}, "stem"), "strides", {2, 2});
  test::set_ints(m.node("Conv", {"h", "w2"}, {"y"}, "stem"), "strides", {2, 2});
  const Graph g = prepare(m.load(), 1);
  CHECK(count_op(g, Op::Conv) == 0);
  std::set<std::string> made;
  for (const Node& n : g.nodes)
    for (const auto& out : n.outputs) CHECK(made.insert(out).second);  // each value made once
  const auto x = random_values(32, 13);
  float got[3];
  CpuEngine(g).run({x.data()}, {got});
  const auto h = patch_conv(x, {1, 2, 4, 4}, random_values(16, 11), {2, 2, 2, 2}, std::vector<float>(2, 0.f));
  const auto want = patch_conv(h, {1, 2, 2, 2}, random_values(24, 12), {3, 2, 2, 2}, std::vector<float>(3, 0.f));
  for (std::size_t i = 0; i < 3; ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-5f);
}

TEST_CASE("a Conv that does not tile its input stays a Conv", "[nn][passes][patchify]") {
  struct Case {
    const char* what;
    Shape x;
    std::int64_t kh, kw;
    Ints strides, pads;
    std::int64_t group;
  };
  for (const Case& c : {Case{"overlapping windows", {1, 3, 8, 8}, 3, 3, {2, 2}, {0, 0, 0, 0}, 1},
                        Case{"padding", {1, 3, 8, 8}, 4, 4, {4, 4}, {1, 1, 1, 1}, 1},
                        Case{"groups", {1, 4, 8, 8}, 4, 4, {4, 4}, {0, 0, 0, 0}, 2},
                        Case{"a remainder the kernel does not cover", {1, 3, 10, 8}, 4, 4, {4, 4}, {0, 0, 0, 0}, 1},
                        Case{"1x1", {1, 3, 8, 8}, 1, 1, {1, 1}, {0, 0, 0, 0}, 1}}) {
    INFO(c.what);
    const Graph g = prepare(tiling_conv(c.x, 4, c.kh, c.kw, c.strides, c.pads, c.group).load(), 1);
    CHECK(count_op(g, Op::Conv) == 1);
  }
}

TEST_CASE("Transposes that undo each other around a reshape collapse into one Reshape", "[nn][passes][collapse_moves]") {
  // A patch embedding's way back: tokens [N, h*w, C] -> grid [N, h, w, C] -> NCHW -> flatten -> tokens again.
  ModelBuilder m(13);
  m.input("x", {2, 6, 5}).output("y").ints("grid", {2, 2, 3, 5}).ints("flat", {2, 5, 6});
  m.node("Relu", {"x"}, {"r"});
  m.node("Reshape", {"r", "grid"}, {"g"});
  test::set_ints(m.node("Transpose", {"g"}, {"nchw"}), "perm", {0, 3, 1, 2});
  m.node("Reshape", {"nchw", "flat"}, {"f"});
  test::set_ints(m.node("Transpose", {"f"}, {"y"}), "perm", {0, 2, 1});
  const Graph g = prepare(m.load(), 2);
  CHECK(count_op(g, Op::Transpose) == 0);
  CHECK(count_op(g, Op::Reshape) == 1);
  const auto x = random_values(60, 3);
  std::vector<float> y(60);
  CpuEngine(g).run({x.data()}, {y.data()});
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == std::max(0.f, x[i]));
}

TEST_CASE("random chains of Reshape and Transpose compute what they did before collapsing", "[nn][passes][collapse_moves]") {
  std::mt19937 rng(20261203);
  const auto pick = [&](std::int64_t n) { return static_cast<std::int64_t>(rng() % static_cast<unsigned>(n)); };
  int collapsed = 0;
  for (int trial = 0; trial < 200; ++trial) {
    Shape shape;
    for (std::int64_t r = 2 + pick(3), d = 0; d < r; ++d) shape.push_back(std::vector<std::int64_t>{1, 2, 3, 4, 6}[static_cast<std::size_t>(pick(5))]);
    shape[0] = 2;  // the batch
    const Shape input = shape;
    ModelBuilder chain(13), kept(13);
    for (ModelBuilder* m : {&chain, &kept}) m->input("x", input);
    std::string value = "x";
    const int steps = 2 + static_cast<int>(pick(4));
    for (int s = 0; s < steps; ++s) {
      const std::string out = s + 1 == steps ? "y" : "v" + std::to_string(s);
      if (pick(2) == 0) {  // a random permutation
        Ints perm(shape.size());
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), rng);
        Shape next;
        for (auto p : perm) next.push_back(shape[static_cast<std::size_t>(p)]);
        for (ModelBuilder* m : {&chain, &kept}) test::set_ints(m->node("Transpose", {value}, {out}), "perm", perm);
        shape = next;
      } else {  // merge two neighbours or split a dim into two factors
        Shape next = shape;
        const std::size_t d = static_cast<std::size_t>(pick(static_cast<std::int64_t>(shape.size())));
        if (d + 1 < shape.size() && (pick(2) == 0 || shape.size() >= 5)) {
          next[d] *= next[d + 1];
          next.erase(next.begin() + static_cast<std::ptrdiff_t>(d) + 1);
        } else {
          std::int64_t f = shape[d] % 2 == 0 ? 2 : shape[d] % 3 == 0 ? 3 : 1;
          next[d] /= f;
          next.insert(next.begin() + static_cast<std::ptrdiff_t>(d), f);
        }
        const std::string target = out + "_shape";
        for (ModelBuilder* m : {&chain, &kept}) {
          m->ints(target, next);
          m->node("Reshape", {value, target}, {out});
        }
        shape = next;
      }
      if (s + 1 < steps) kept.output(out);  // read outside the chain: nothing collapses
      value = out;
    }
    for (ModelBuilder* m : {&chain, &kept}) m->output("y");
    INFO("trial " << trial << " input " << to_string(input) << " output " << to_string(shape));
    const Graph a = prepare(chain.load(), 2), b = prepare(kept.load(), 2);
    collapsed += a.nodes.size() < b.nodes.size();
    CHECK(count_op(a, Op::Transpose) <= count_op(b, Op::Transpose));
    const auto x = random_values(static_cast<std::size_t>(element_count(input)), static_cast<unsigned>(trial));
    std::vector<float> got(x.size());
    CpuEngine(a).run({x.data()}, {got.data()});
    std::vector<std::vector<float>> outs;
    std::vector<float*> pointers;
    for (const auto& o : b.outputs) outs.emplace_back(static_cast<std::size_t>(element_count(o.shape)));
    for (auto& o : outs) pointers.push_back(o.data());
    CpuEngine(b).run({x.data()}, pointers);
    CHECK(got == outs.back());
  }
  CHECK(collapsed > 50);
}

TEST_CASE("a skip connection behind a Reshape joins the product as its residual", "[nn][passes][sink_reshapes]") {
  // A transformer's out-projection on rows [B*S, E], reshaped back to [B, S, E], plus the skip connection.
  const auto model = [](bool block) {
    ModelBuilder m(13);
    m.input("x", {2, 3, 4}).output("y").ints("rows", {6, 4}).ints("back", {2, 3, 4});
    m.weights("w", {4, 4}, random_values(16, 5));
    m.node("Relu", {"x"}, {"skip"});
    m.node("Reshape", {"x", "rows"}, {"r"});
    m.node("MatMul", {"r", "w"}, {"p"});
    m.node("Reshape", {"p", "back"}, {"pb"});
    m.node("Add", {"skip", "pb"}, {"y"});
    if (block) m.output("pb");  // read elsewhere: stays as written
    return prepare(m.load(), 2);
  };
  const Graph g = model(false), kept = model(true);
  CHECK(count_op(g, Op::Add) == 0);
  REQUIRE(count_op(g, Op::Linear) == 1);
  const auto linear = std::find_if(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.op == Op::Linear; });
  CHECK_FALSE(linear->inputs[3].empty());
  CHECK(count_op(kept, Op::Add) == 1);
  const auto x = random_values(24, 6);
  std::vector<float> got(24), want(24), pb(24);
  CpuEngine(g).run({x.data()}, {got.data()});
  CpuEngine(kept).run({x.data()}, {want.data(), pb.data()});
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(std::fabs(got[i] - want[i]) <= 1e-6f);
}
