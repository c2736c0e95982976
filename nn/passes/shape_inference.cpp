// Concrete output shapes of a canonical node (see canonicalize.cpp), checking that its inputs agree.
#include <algorithm>
#include <cmath>

#include "nn/elementwise_math.hpp"
#include "nn/passes/pass_support.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::passes {
namespace {

using Ints = std::vector<std::int64_t>;

// a + b, a * b for extents and attribute values from the file: overflow fails naming the node.
std::int64_t add(const Graph& g, const Node& n, std::int64_t a, std::int64_t b) {
  const auto sum = checked_add(a, b);
  if (!sum) fail(g, n, "size arithmetic overflows (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return *sum;
}
std::int64_t mul(const Graph& g, const Node& n, std::int64_t a, std::int64_t b) {
  const auto product = checked_mul(a, b);
  if (!product) fail(g, n, "size arithmetic overflows (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return *product;
}

const Shape& in(const Graph& g, const Node& n, std::size_t index) { return g.shape_of(n.inputs.at(index)); }

Shape broadcast(const Graph& g, const Node& n, const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t da = i < out.size() - a.size() ? 1 : a[i - (out.size() - a.size())];
    const std::int64_t db = i < out.size() - b.size() ? 1 : b[i - (out.size() - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(g, n, "shapes " + to_string(a) + " and " + to_string(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

// Output extent of a sliding window (ceil_mode as PyTorch and ONNX: the last window must start inside the input).
std::int64_t window_extent(const Graph& g, const Node& n, std::int64_t size, std::int64_t pad_begin,
                           std::int64_t pad_end, std::int64_t kernel, std::int64_t stride, std::int64_t dilation,
                           bool ceil_mode) {
  if (kernel < 1 || stride < 1 || dilation < 1 || pad_begin < 0 || pad_end < 0)
    fail(g, n, "kernel " + std::to_string(kernel) + ", stride " + std::to_string(stride) + ", dilation " +
                   std::to_string(dilation) + " must be positive and pads " + std::to_string(pad_begin) + ", " +
                   std::to_string(pad_end) + " non-negative");
  const std::int64_t padded = add(g, n, add(g, n, size, pad_begin), pad_end);
  const std::int64_t window = add(g, n, mul(g, n, dilation, kernel - 1), 1);
  const std::int64_t span = padded - window;
  if (span < 0) fail(g, n, "the window (kernel " + std::to_string(kernel) + ") is larger than the padded input (" +
                               std::to_string(padded) + ")");
  std::int64_t out = (ceil_mode ? span / stride + (span % stride != 0) : span / stride) + 1;
  if (ceil_mode && mul(g, n, out - 1, stride) >= size + pad_begin) --out;
  return out;
}

Shape conv(const Graph& g, const Node& n) {
  const Shape& x = in(g, n, 0);
  const Shape& w = in(g, n, 1);
  const std::int64_t group = n.attrs.i("group", 1);
  if (x.size() != 4 || w.size() != 4)
    fail(g, n, "needs a 4-D input and weights, not " + to_string(x) + " and " + to_string(w));
  if (group < 1 || x[1] != mul(g, n, w[1], group) || w[0] % group != 0)
    fail(g, n, "input " + to_string(x) + " does not fit weights " + to_string(w) + " with group " + std::to_string(group));
  if (!n.inputs[2].empty() && element_count(in(g, n, 2)) != w[0])
    fail(g, n, "bias " + to_string(in(g, n, 2)) + " does not match " + std::to_string(w[0]) + " output channels");
  const Ints s = n.attrs.ints("strides"), p = n.attrs.ints("pads"), d = n.attrs.ints("dilations");
  Shape out{x[0], w[0], window_extent(g, n, x[2], p[0], p[2], w[2], s[0], d[0], false),
            window_extent(g, n, x[3], p[1], p[3], w[3], s[1], d[1], false)};
  if (n.inputs.size() > 3 && !n.inputs[3].empty() && in(g, n, 3) != out)
    fail(g, n, "residual " + to_string(in(g, n, 3)) + " differs from the output " + to_string(out));
  return out;
}

// stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 - pads (ONNX ConvTranspose).
Shape conv_transpose(const Graph& g, const Node& n) {
  const Shape& x = in(g, n, 0);
  const Shape& w = in(g, n, 1);
  const std::int64_t group = n.attrs.i("group", 1);
  if (x.size() != 4 || w.size() != 4)
    fail(g, n, "needs a 4-D input and weights, not " + to_string(x) + " and " + to_string(w));
  if (group < 1 || x[1] != w[0] || w[0] % group != 0)
    fail(g, n, "input " + to_string(x) + " does not fit weights " + to_string(w) + " with group " + std::to_string(group));
  const std::int64_t out_channels = mul(g, n, w[1], group);
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && element_count(in(g, n, 2)) != out_channels)
    fail(g, n, "bias " + to_string(in(g, n, 2)) + " does not match " + std::to_string(out_channels) + " output channels");
  const Ints s = n.attrs.ints("strides"), p = n.attrs.ints("pads"), d = n.attrs.ints("dilations");
  const Ints op = n.attrs.ints("output_padding");
  if (s.size() != 2 || p.size() != 4 || d.size() != 2 || op.size() != 2)
    fail(g, n, "strides, dilations and output_padding need 2 values and pads 4");
  Shape out{x[0], out_channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    if (s[i] < 1 || d[i] < 1 || p[i] < 0 || p[i + 2] < 0 || op[i] < 0 || w[2 + i] < 1 || x[2 + i] < 1)
      fail(g, n, "kernel, strides, dilations and input sizes must be positive, pads and output_padding non-negative");
    const std::int64_t full = add(g, n, add(g, n, mul(g, n, s[i], x[2 + i] - 1), mul(g, n, d[i], w[2 + i] - 1)),
                                  add(g, n, op[i], 1));
    out[static_cast<std::size_t>(2 + i)] = full - p[i] - p[i + 2];
    if (out[static_cast<std::size_t>(2 + i)] < 1)
      fail(g, n, "pads [" + join_ints(p) + "] crop away the whole output (" + std::to_string(full) + " pixels)");
  }
  return out;
}

Shape pool(const Graph& g, const Node& n) {
  const Shape& x = in(g, n, 0);
  if (x.size() != 4) fail(g, n, "needs a 4-D (NCHW) input, not " + to_string(x));
  const Ints k = n.attrs.ints("kernel_shape"), s = n.attrs.ints("strides"), p = n.attrs.ints("pads");
  const Ints d = n.attrs.ints("dilations", {1, 1});
  const bool ceil_mode = n.attrs.i("ceil_mode", 0) != 0;
  return {x[0], x[1], window_extent(g, n, x[2], p[0], p[2], k[0], s[0], d[0], ceil_mode),
          window_extent(g, n, x[3], p[1], p[3], k[1], s[1], d[1], ceil_mode)};
}

Shape batchnorm(const Graph& g, const Node& n) {
  const Shape& x = in(g, n, 0);
  if (x.size() < 2) fail(g, n, "input " + to_string(x) + " has no channel dimension");
  for (std::size_t i = 1; i <= 4; ++i)
    if (element_count(in(g, n, i)) != x[1])
      fail(g, n, "parameter '" + n.inputs[i] + "' " + to_string(in(g, n, i)) + " does not match " +
                     std::to_string(x[1]) + " channels");
  return x;
}

Shape gemm(const Graph& g, const Node& n) {
  const Shape& a = in(g, n, 0);
  const Shape& b = in(g, n, 1);
  if (a.size() != 2 || b.size() != 2) fail(g, n, "needs 2-D inputs, not " + to_string(a) + " and " + to_string(b));
  const bool ta = n.attrs.i("transA", 0) != 0, tb = n.attrs.i("transB", 0) != 0;
  const std::int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  const std::int64_t kb = tb ? b[1] : b[0], cols = tb ? b[0] : b[1];
  if (k != kb) fail(g, n, "inner dimensions differ: " + to_string(a) + " and " + to_string(b));
  const Shape out{m, cols};
  if (!n.inputs[2].empty() && broadcast(g, n, in(g, n, 2), out) != out)
    fail(g, n, "C " + to_string(in(g, n, 2)) + " does not broadcast to " + to_string(out));
  return out;
}

// numpy.matmul: 1-D operands are promoted (and the added dimension dropped), leading dimensions broadcast.
Shape matmul(const Graph& g, const Node& n) {
  Shape a = in(g, n, 0), b = in(g, n, 1);
  if (a.empty() || b.empty()) fail(g, n, "scalars cannot be multiplied as matrices");
  const bool a_vector = a.size() == 1, b_vector = b.size() == 1;
  if (a_vector) a.insert(a.begin(), 1);
  if (b_vector) b.push_back(1);
  if (a.back() != b[b.size() - 2])
    fail(g, n, "inner dimensions differ: " + to_string(in(g, n, 0)) + " and " + to_string(in(g, n, 1)));
  Shape out = broadcast(g, n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!a_vector) out.push_back(a[a.size() - 2]);
  if (!b_vector) out.push_back(b.back());
  return out;
}

Shape concat(const Graph& g, const Node& n) {
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  Shape out = in(g, n, 0);
  for (std::size_t i = 1; i < n.inputs.size(); ++i) {
    const Shape& s = in(g, n, i);
    bool fits = s.size() == out.size();
    for (std::size_t d = 0; fits && d < s.size(); ++d) fits = d == axis || s[d] == out[d];
    if (!fits) fail(g, n, "input " + to_string(s) + " does not fit " + to_string(in(g, n, 0)) + " along axis " + std::to_string(axis));
    out[axis] = add(g, n, out[axis], s[axis]);
  }
  return out;
}

std::vector<Shape> split(const Graph& g, const Node& n) {
  const Shape& x = in(g, n, 0);
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  const Ints sizes = n.attrs.ints("split");
  std::int64_t total = 0;
  std::vector<Shape> out;
  for (auto size : sizes) {
    if (size < 0) fail(g, n, "split [" + join_ints(sizes) + "] has a negative size");
    total = add(g, n, total, size);
    out.push_back(x);
    out.back()[axis] = size;
  }
  if (total != x[axis])
    fail(g, n, "split [" + join_ints(sizes) + "] does not add up to dimension " + std::to_string(axis) + " of " + to_string(x));
  return out;
}

Shape slice(const Node& n) {
  const Ints starts = n.attrs.ints("starts"), ends = n.attrs.ints("ends"), steps = n.attrs.ints("steps");
  Shape out(starts.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t step = steps[i], span = ends[i] - starts[i];
    out[i] = std::max<std::int64_t>(0, step > 0 ? (span + step - 1) / step : (span + step + 1) / step);
  }
  return out;
}

Shape pad(const Graph& g, const Node& n) {
  Shape out = in(g, n, 0);
  const Ints pads = n.attrs.ints("pads");
  const std::string mode = n.attrs.s("mode", "constant");
  for (std::size_t i = 0; i < out.size(); ++i) {
    const std::int64_t before = pads[i], after = pads[i + out.size()];
    if (mode == "reflect" && std::max(before, after) >= out[i])
      fail(g, n, "reflect padding of " + std::to_string(std::max(before, after)) + " needs a dimension larger than " +
                     std::to_string(out[i]));
    if (mode == "edge" && out[i] == 0 && std::max(before, after) > 0) fail(g, n, "edge padding of an empty dimension");
    out[i] = add(g, n, out[i], add(g, n, before, after));
    if (out[i] < 0) fail(g, n, "pads [" + join_ints(pads) + "] remove more than dimension " + std::to_string(i) + " holds");
  }
  return out;
}

Shape gather(const Graph& g, const Node& n) {
  const Shape& data = in(g, n, 0);
  const Shape& indices = in(g, n, 1);
  const auto axis = static_cast<std::size_t>(normalize_axis(g, n, n.attrs.i("axis", 0), static_cast<std::int64_t>(data.size())));
  Shape out(data.begin(), data.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), indices.begin(), indices.end());
  out.insert(out.end(), data.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.end());
  return out;
}

// ArgMax/ArgMin: the axis becomes 1 or goes. TopK: the axis becomes k, for Values and Indices alike.
Shape arg_extreme(const Graph& g, const Node& n) {
  Shape out = in(g, n, 0);
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  if (axis >= out.size()) fail(g, n, "axis " + std::to_string(axis) + " is outside " + to_string(out));
  if (n.attrs.i("keepdims", 1)) out[axis] = 1;
  else out.erase(out.begin() + static_cast<std::ptrdiff_t>(axis));
  return out;
}

std::vector<Shape> top_k(const Graph& g, const Node& n) {
  Shape out = in(g, n, 0);
  const auto axis = static_cast<std::size_t>(n.attrs.i("axis", 0));
  const std::int64_t k = n.attrs.i("k", 0);
  if (axis >= out.size() || k < 1 || k > out[axis])
    fail(g, n, "k " + std::to_string(k) + " along axis " + std::to_string(axis) + " does not fit " + to_string(out));
  out[axis] = k;
  return {out, out};
}

Shape reduce(const Graph& g, const Node& n) {
  Shape out = in(g, n, 0);
  const Ints axes = n.attrs.ints("axes");
  for (auto a : axes) out[static_cast<std::size_t>(a)] = n.attrs.i("keepdims", 1) ? 1 : -1;
  if (!n.attrs.i("keepdims", 1)) out.erase(std::remove(out.begin(), out.end(), -1), out.end());
  return out;
}

// Expand: the input broadcast with the shape the second input holds (numpy rules; 1 keeps the input's size).
Shape expand(const Graph& g, const Node& n) {
  const Tensor* target = constant_input(g, n, 1);
  if (!target) fail(g, n, "the shape ('" + n.inputs[1] + "') must be a constant");
  return broadcast(g, n, in(g, n, 0), as_ints(*target));
}

// Range: ceil((limit - start) / delta) elements, from the constant scalars.
Shape range(const Graph& g, const Node& n) {
  std::vector<double> v;
  for (std::size_t i = 0; i < 3; ++i) {
    const Tensor* t = constant_input(g, n, i);
    if (!t || t->elements() != 1) fail(g, n, "start, limit and delta must be constant scalars");
    v.push_back(t->type == ElementType::i64 ? static_cast<double>(t->i64[0]) : static_cast<double>(t->f32[0]));
  }
  if (v[2] == 0 || !std::isfinite(v[0]) || !std::isfinite(v[1]) || !std::isfinite(v[2]))
    fail(g, n, "delta must be non-zero and start, limit, delta finite");
  const double count = std::ceil((v[1] - v[0]) / v[2]);
  if (count > static_cast<double>(kMaxValueElements)) fail(g, n, "would make more than 2^36 elements");
  return {static_cast<std::int64_t>(std::max(0.0, count))};
}

}  // namespace

void check_value_shape(const Graph& g, const Node& n, const std::string& value, const Shape& shape) {
  const auto count = checked_product<std::int64_t>(shape);
  if (!count)
    fail(g, n, "output '" + value + "' would have shape " + to_string(shape) +
                   (std::any_of(shape.begin(), shape.end(), [](std::int64_t d) { return d < 0; })
                        ? ", with a negative dimension"
                        : ", more elements than fit in 64 bits"));
  if (*count > kMaxValueElements)
    fail(g, n, "output '" + value + "' would have shape " + to_string(shape) + ", " + std::to_string(*count) +
                   " elements; at most " + std::to_string(kMaxValueElements) + " are supported");
}

std::vector<Shape> infer_shapes(const Node& n, const Graph& g) {
  const Op op = n.op;
  if (op == Op::Conv) return {conv(g, n)};
  if (op == Op::ConvTranspose) return {conv_transpose(g, n)};
  if (op == Op::MaxPool || op == Op::AveragePool) return {pool(g, n)};
  if (op == Op::BatchNormalization) return {batchnorm(g, n)};
  if (is_activation(op) || op == Op::Softmax || op == Op::LogSoftmax || op == Op::Identity || op == Op::Dropout || op == Op::Cast)
    return {in(g, n, 0)};
  if (op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Div || op == Op::Pow || op == Op::Max || op == Op::Min ||
      op == Op::Equal || op == Op::Less || op == Op::Greater || op == Op::LessOrEqual || op == Op::GreaterOrEqual ||
      op == Op::And || op == Op::Or || op == Op::Mod)
    return {broadcast(g, n, in(g, n, 0), in(g, n, 1))};
  if (unary_math_of(op) || op == Op::LayerNormalization || op == Op::Not || op == Op::ScatterND) return {in(g, n, 0)};
  if (reduce_math_of(op)) return {reduce(g, n)};
  if (op == Op::ArgMax || op == Op::ArgMin) return {arg_extreme(g, n)};
  if (op == Op::TopK) return top_k(g, n);
  if (op == Op::Where) return {broadcast(g, n, broadcast(g, n, in(g, n, 0), in(g, n, 1)), in(g, n, 2))};
  if (op == Op::Expand) return {expand(g, n)};
  if (op == Op::Range) return {range(g, n)};
  if (op == Op::GlobalAveragePool) {
    Shape out = in(g, n, 0);
    std::fill(out.begin() + 2, out.end(), 1);
    return {out};
  }
  if (op == Op::Reshape) {
    const Shape out = n.attrs.ints("shape");
    if (element_count(out) != element_count(in(g, n, 0)))
      fail(g, n, "cannot reshape " + to_string(in(g, n, 0)) + " to " + to_string(out));
    return {out};
  }
  if (op == Op::Transpose) {
    const Shape& x = in(g, n, 0);
    Shape out;
    for (auto p : n.attrs.ints("perm")) out.push_back(x[static_cast<std::size_t>(p)]);
    return {out};
  }
  if (op == Op::Gemm) return {gemm(g, n)};
  if (op == Op::MatMul) return {matmul(g, n)};
  if (op == Op::Concat) return {concat(g, n)};
  if (op == Op::Split) return split(g, n);
  if (op == Op::Slice) return {slice(n)};
  if (op == Op::Resize) return {n.attrs.ints("sizes")};
  if (op == Op::Pad) return {pad(g, n)};
  if (op == Op::Gather) return {gather(g, n)};
  if (op == Op::GatherElements) return {in(g, n, 1)};  // canonicalize checked the shapes
  if (op == Op::GridSample) {
    const Shape &x = in(g, n, 0), &grid = in(g, n, 1);
    if (x.size() != 4 || grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
      fail(g, n, "input " + to_string(x) + " and grid " + to_string(grid) + " are not [N, C, H, W] and [N, Ho, Wo, 2]");
    return {Shape{x[0], x[1], grid[1], grid[2]}};
  }
  fail(g, n, "no shape inference for operator " + op_name(op));
}

}  // namespace sluice::nn::passes
