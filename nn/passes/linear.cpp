// Products by a constant matrix become Linear nodes (graph.hpp), so that fuse.cpp can give them the bias,
// residual and activation that follow, as it does for Conv:
//   MatMul(X, W)          X of rank >= 2 computed at run time, W a 2-D constant [K, N]
//   Gemm(A, B, C)         A computed at run time, transA = 0, B constant, C absent or a constant that varies
//                         only along N ([N], [1, N] or a scalar); alpha goes into W, beta into the bias; transB
//                         is undone by transposing B once here
// Other products (both operands computed, batched constants, a Gemm whose C varies along M) stay as they are.
#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

// C of a Gemm as one value per output column (n of them), or nullopt when it varies along rows too.
std::optional<std::vector<float>> per_column(const Tensor& c, std::int64_t n) {
  const Shape& s = c.shape;
  if (s.size() > 2 || c.type != ElementType::f32) return std::nullopt;
  const std::int64_t rows = s.size() == 2 ? s[0] : 1, cols = s.empty() ? 1 : s.back();
  if (rows != 1 || (cols != 1 && cols != n)) return std::nullopt;
  std::vector<float> out(static_cast<std::size_t>(n));
  for (std::int64_t j = 0; j < n; ++j) out[static_cast<std::size_t>(j)] = c.f32[static_cast<std::size_t>(cols == 1 ? 0 : j)];
  return out;
}

std::optional<Node> linear_from_matmul(Graph& g, const Node& mm) {
  const std::string &x = mm.inputs[0], &w = mm.inputs[1];
  if (g.is_constant(x) || !g.is_constant(w) || g.constants.at(w).type != ElementType::f32) return std::nullopt;
  if (g.shape_of(w).size() != 2 || g.shape_of(x).size() < 2) return std::nullopt;
  Node linear{mm.name, Op::Linear, {x, w, "", ""}, mm.outputs, {}};
  linear.attrs.values["activation"] = std::string();
  return linear;
}

std::optional<Node> linear_from_gemm(Graph& g, const Node& gemm) {
  const std::string &a = gemm.inputs[0], &b = gemm.inputs[1];
  const std::string c = gemm.inputs.size() > 2 ? gemm.inputs[2] : "";
  if (g.is_constant(a) || !g.is_constant(b) || gemm.attrs.i("transA", 0) != 0) return std::nullopt;
  const Tensor& bt = g.constants.at(b);
  if (bt.type != ElementType::f32 || bt.shape.size() != 2) return std::nullopt;
  const bool trans_b = gemm.attrs.i("transB", 0) != 0;
  const std::int64_t k = trans_b ? bt.shape[1] : bt.shape[0], n = trans_b ? bt.shape[0] : bt.shape[1];
  const float alpha = gemm.attrs.f("alpha", 1.f), beta = gemm.attrs.f("beta", 1.f);
  std::optional<std::vector<float>> bias;
  if (!c.empty()) {
    if (!g.is_constant(c) || !(bias = per_column(g.constants.at(c), n))) return std::nullopt;
    for (float& v : *bias) v *= beta;
  }
  Node linear{gemm.name, Op::Linear, {a, b, "", ""}, gemm.outputs, {}};
  linear.attrs.values["activation"] = std::string();
  if (trans_b || alpha != 1.f) {  // W = alpha * B (transposed to [K, N])
    Tensor w;
    w.shape = {k, n};
    w.f32.resize(static_cast<std::size_t>(k * n));
    for (std::int64_t r = 0; r < k; ++r)
      for (std::int64_t j = 0; j < n; ++j)
        w.f32[static_cast<std::size_t>(r * n + j)] =
            alpha * bt.f32[static_cast<std::size_t>(trans_b ? j * k + r : r * n + j)];
    linear.inputs[1] = add_constant(g, gemm.name, "weight", std::move(w));
  }
  if (bias) {
    Tensor t;
    t.shape = {n};
    t.f32 = std::move(*bias);
    linear.inputs[2] = add_constant(g, gemm.name, "bias", std::move(t));
  }
  return linear;
}

}  // namespace

void make_linear(Graph& g) {
  for (Node& node : g.nodes) {
    std::optional<Node> linear;
    if (node.op == Op::MatMul && node.inputs.size() == 2) linear = linear_from_matmul(g, node);
    else if (node.op == Op::Gemm && node.inputs.size() >= 2) linear = linear_from_gemm(g, node);
    if (!linear) continue;
    g.rewrites.push_back("made " + node.where() + " a Linear (a product by a constant matrix)");
    node = std::move(*linear);
  }
}

}  // namespace sluice::nn::passes
