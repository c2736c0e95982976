// One spelling per operation (the prepared form in nn/graph.hpp): parameter inputs become attributes, every
// default is written out, axes are non-negative, auto_pad and the Flatten/Squeeze/Unsqueeze/Upsample variants
// are resolved. Needs the shapes of the node's inputs and the values of its parameter inputs.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "nn/elementwise_math.hpp"
#include "nn/passes/pass_support.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::passes {
namespace {

using Ints = std::vector<std::int64_t>;

Node respelled(const Node& from, Op op, std::vector<std::string> inputs, Attributes attrs) {
  Node n;
  n.name = from.name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.outputs = from.outputs;
  n.attrs = std::move(attrs);
  return n;
}

const std::string& input(const Graph& g, const Node& n, std::size_t index) {
  if (index >= n.inputs.size() || n.inputs[index].empty())
    fail(g, n, "input " + std::to_string(index) + " is missing");
  return n.inputs[index];
}

const Shape& input_shape(const Graph& g, const Node& n, std::size_t index) { return g.shape_of(input(g, n, index)); }

Ints constant_ints(const Graph& g, const Node& n, std::size_t index, const std::string& what) {
  const Tensor* t = constant_input(g, n, index);
  if (!t) fail(g, n, what + " ('" + input(g, n, index) + "') must be a constant, known before running");
  return as_ints(*t);
}

// A constant input that may be absent or an empty placeholder tensor (as exporters write for "none").
const Tensor* optional_constant(const Graph& g, const Node& n, std::size_t index, const std::string& what) {
  if (index >= n.inputs.size() || n.inputs[index].empty()) return nullptr;
  const Tensor* t = constant_input(g, n, index);
  if (!t) fail(g, n, what + " ('" + n.inputs[index] + "') must be a constant, known before running");
  return t->elements() == 0 ? nullptr : t;
}

// Opset 18's `axes` of Pad (an input) and Resize (an attribute): the axes its per-axis values are for,
// non-negative and unique.
Ints unique_axes(const Graph& g, const Node& n, Ints axes, std::int64_t rank) {
  std::vector<bool> seen(static_cast<std::size_t>(rank), false);
  for (auto& a : axes) {
    a = normalize_axis(g, n, a, rank);
    if (seen[static_cast<std::size_t>(a)]) fail(g, n, "axes [" + join_ints(axes) + "] repeat an axis");
    seen[static_cast<std::size_t>(a)] = true;
  }
  return axes;
}

// Values given for `axes` only (`per_axis` of them per axis: Pad's begins then ends), spread over every
// dimension, `fill` elsewhere.
template <typename T>
std::vector<T> spread_over_axes(const Graph& g, const Node& n, const std::vector<T>& given, const Ints& axes,
                                std::size_t per_axis, std::vector<T> fill, const std::string& what) {
  const std::size_t rank = fill.size() / per_axis;
  if (given.size() != per_axis * axes.size())
    fail(g, n, what + " holds " + std::to_string(given.size()) + " values; axes [" + join_ints(axes) + "] need " +
                   std::to_string(per_axis * axes.size()));
  for (std::size_t k = 0; k < per_axis; ++k)
    for (std::size_t i = 0; i < axes.size(); ++i)
      fill[k * rank + static_cast<std::size_t>(axes[i])] = given[k * axes.size() + i];
  return fill;
}

void refuse_used_extra_outputs(const Graph& g, const Node& n, const std::set<std::string>& used, const char* what) {
  for (std::size_t i = 1; i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty() && used.count(n.outputs[i]))
      fail(g, n, std::string("output '") + n.outputs[i] + "' (" + what + ") is used, which is not supported");
}

Node first_output_only(Node n) {
  n.outputs.resize(1);
  return n;
}

void require_rank(const Graph& g, const Node& n, const Shape& x, std::size_t rank, const char* what) {
  if (x.size() != rank)
    fail(g, n, std::string(what) + " (input shape " + to_string(x) + ")");
}

Ints pair_attr(const Graph& g, const Node& n, const std::string& name) {
  Ints v = n.attrs.ints(name, {1, 1});
  if (v.size() != 2 || v[0] < 1 || v[1] < 1)
    fail(g, n, "attribute " + name + " [" + join_ints(v) + "] must hold two positive values (2-D only)");
  return v;
}

// Explicit [top, left, bottom, right] pads, with auto_pad resolved against the input size.
Ints spatial_pads(const Graph& g, const Node& n, const Shape& x, const Ints& kernel, const Ints& strides,
                  const Ints& dilations) {
  const std::string auto_pad = n.attrs.s("auto_pad", "NOTSET");
  if (auto_pad == "NOTSET") {
    Ints pads = n.attrs.ints("pads", {0, 0, 0, 0});
    if (pads.size() != 4 || std::any_of(pads.begin(), pads.end(), [](auto p) { return p < 0; }))
      fail(g, n, "attribute pads [" + join_ints(pads) + "] must hold four non-negative values");
    return pads;
  }
  if (auto_pad == "VALID") return {0, 0, 0, 0};
  if (auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    fail(g, n, "auto_pad '" + auto_pad + "' is not supported (NOTSET, VALID, SAME_UPPER, SAME_LOWER)");
  Ints pads(4);
  for (int d = 0; d < 2; ++d) {
    const std::int64_t in = x[2 + d];
    const std::int64_t out = in / strides[d] + (in % strides[d] != 0);
    // (out - 1) * stride + (kernel - 1) * dilation + 1 - in, with sizes from the file: checked.
    const auto covered = checked_mul(out - 1, strides[d]);
    const auto reach = checked_mul(kernel[d] - 1, dilations[d]);
    const auto span = covered && reach ? checked_add(*covered, *reach) : std::nullopt;
    if (!span || *span == std::numeric_limits<std::int64_t>::max())
      fail(g, n, "auto_pad " + auto_pad + " with kernel, strides and dilations this large overflows 64 bits");
    const std::int64_t total = std::max<std::int64_t>(0, *span + 1 - in);
    const std::int64_t smaller = total / 2, larger = total - smaller;  // SAME_UPPER puts the odd pixel at the end
    pads[d] = auto_pad == "SAME_UPPER" ? smaller : larger;
    pads[d + 2] = total - pads[d];
  }
  return pads;
}

Node conv(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  require_rank(g, n, x, 4, "only 2-D convolutions (4-D NCHW input) are supported");
  const Tensor* w = constant_input(g, n, 1);
  if (!w) fail(g, n, "weights '" + input(g, n, 1) + "' must be a constant (initializer)");
  if (w->shape.size() != 4) fail(g, n, "weights have shape " + to_string(w->shape) + "; expected 4-D OIHW");
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (has_bias && !constant_input(g, n, 2)) fail(g, n, "bias '" + n.inputs[2] + "' must be a constant (initializer)");
  const Ints kernel{w->shape[2], w->shape[3]};
  if (n.attrs.has("kernel_shape") && n.attrs.ints("kernel_shape") != kernel)
    fail(g, n, "kernel_shape [" + join_ints(n.attrs.ints("kernel_shape")) + "] disagrees with the weights " +
                   to_string(w->shape));
  const Ints strides = pair_attr(g, n, "strides"), dilations = pair_attr(g, n, "dilations");
  const std::int64_t group = n.attrs.i("group", 1);
  if (group < 1) fail(g, n, "group " + std::to_string(group) + " must be positive");
  Attributes a;
  a.values["strides"] = strides;
  a.values["pads"] = spatial_pads(g, n, x, kernel, strides, dilations);
  a.values["dilations"] = dilations;
  a.values["group"] = group;
  a.values["activation"] = std::string();
  a.values["act_alpha"] = 0.f;
  a.values["act_beta"] = 0.f;
  return respelled(n, Op::Conv, {n.inputs[0], n.inputs[1], has_bias ? n.inputs[2] : "", ""}, std::move(a));
}

// ConvTranspose's pads, with output_shape and auto_pad resolved (the ONNX spec's formulas): the full transposed
// convolution spans stride * (in - 1) + output_padding + (kernel - 1) * dilation + 1 pixels; a requested output
// size crops `total` pixels off it, split like the spec says (SAME_UPPER: the odd pixel at the end, otherwise at
// the start). A requested size beyond the full span (auto_pad SAME with a kernel smaller than the stride) gets
// the missing pixels as output_padding.
void transpose_pads(const Graph& g, const Node& n, const Shape& x, const Ints& kernel, const Ints& strides,
                    const Ints& dilations, Ints& pads, Ints& output_padding) {
  const std::string auto_pad = n.attrs.s("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "VALID" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER")
    fail(g, n, "auto_pad '" + auto_pad + "' is not supported (NOTSET, VALID, SAME_UPPER, SAME_LOWER)");
  Ints output_shape = n.attrs.ints("output_shape", {});
  if (output_shape.size() == 4) output_shape.erase(output_shape.begin(), output_shape.begin() + 2);  // N, C given too
  if (!output_shape.empty() && output_shape.size() != 2)
    fail(g, n, "attribute output_shape [" + join_ints(output_shape) + "] must hold two spatial sizes (2-D only)");
  if (output_shape.empty() && (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER"))
    for (int d = 0; d < 2; ++d) {
      const auto size = checked_mul(x[2 + d], strides[d]);
      if (!size) fail(g, n, "auto_pad " + auto_pad + " with this input and stride overflows 64 bits");
      output_shape.push_back(*size);
    }
  if (output_shape.empty()) {
    if (auto_pad == "VALID") pads = {0, 0, 0, 0};
    return;
  }
  for (int d = 0; d < 2; ++d) {
    if (output_shape[d] < 1) fail(g, n, "output_shape [" + join_ints(output_shape) + "] must be positive");
    const auto covered = checked_mul(x[2 + d] - 1, strides[d]);
    const auto reach = checked_mul(kernel[d] - 1, dilations[d]);
    const auto span = covered && reach ? checked_add(*covered, *reach) : std::nullopt;
    const auto full = span ? checked_add(*span, output_padding[d] + 1) : std::nullopt;
    if (!full) fail(g, n, "input, kernel, strides and dilations this large overflow 64 bits");
    const std::int64_t total = *full - output_shape[d];
    if (total < 0) {
      output_padding[d] -= total;
      pads[d] = pads[d + 2] = 0;
      continue;
    }
    const std::int64_t smaller = total / 2, larger = total - smaller;
    pads[d] = auto_pad == "SAME_UPPER" ? smaller : larger;
    pads[d + 2] = total - pads[d];
  }
}

Node conv_transpose(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  require_rank(g, n, x, 4, "only 2-D transposed convolutions (4-D NCHW input) are supported");
  const Tensor* w = constant_input(g, n, 1);
  if (!w) fail(g, n, "weights '" + input(g, n, 1) + "' must be a constant (initializer)");
  if (w->shape.size() != 4)
    fail(g, n, "weights have shape " + to_string(w->shape) + "; expected 4-D [C_in, C_out/group, kH, kW]");
  const bool has_bias = n.inputs.size() > 2 && !n.inputs[2].empty();
  if (has_bias && !constant_input(g, n, 2)) fail(g, n, "bias '" + n.inputs[2] + "' must be a constant (initializer)");
  const Ints kernel{w->shape[2], w->shape[3]};
  if (n.attrs.has("kernel_shape") && n.attrs.ints("kernel_shape") != kernel)
    fail(g, n, "kernel_shape [" + join_ints(n.attrs.ints("kernel_shape")) + "] disagrees with the weights " +
                   to_string(w->shape));
  const Ints strides = pair_attr(g, n, "strides"), dilations = pair_attr(g, n, "dilations");
  const std::int64_t group = n.attrs.i("group", 1);
  if (group < 1) fail(g, n, "group " + std::to_string(group) + " must be positive");
  Ints pads = n.attrs.ints("pads", {0, 0, 0, 0});
  if (pads.size() != 4 || std::any_of(pads.begin(), pads.end(), [](auto p) { return p < 0; }))
    fail(g, n, "attribute pads [" + join_ints(pads) + "] must hold four non-negative values");
  Ints output_padding = n.attrs.ints("output_padding", {0, 0});
  if (output_padding.size() != 2 || output_padding[0] < 0 || output_padding[1] < 0)
    fail(g, n, "attribute output_padding [" + join_ints(output_padding) + "] must hold two non-negative values");
  transpose_pads(g, n, x, kernel, strides, dilations, pads, output_padding);
  for (int d = 0; d < 2; ++d)  // the spec's bound: more would be zeros no window reaches
    if (output_padding[d] >= std::max(strides[d], dilations[d]))
      fail(g, n, "output_padding [" + join_ints(output_padding) + "] must be smaller than the stride or the dilation");
  Attributes a;
  a.values["strides"] = strides;
  a.values["pads"] = pads;
  a.values["dilations"] = dilations;
  a.values["group"] = group;
  a.values["output_padding"] = output_padding;
  return respelled(n, Op::ConvTranspose, {n.inputs[0], n.inputs[1], has_bias ? n.inputs[2] : ""}, std::move(a));
}

Node pool(const Node& n, const Graph& g, const std::set<std::string>& used) {
  const Shape& x = input_shape(g, n, 0);
  require_rank(g, n, x, 4, "only 2-D pooling (4-D NCHW input) is supported");
  refuse_used_extra_outputs(g, n, used, "Indices");
  const Ints kernel = n.attrs.ints("kernel_shape");
  if (kernel.size() != 2 || kernel[0] < 1 || kernel[1] < 1)
    fail(g, n, "kernel_shape [" + join_ints(kernel) + "] must hold two positive values");
  const bool max = n.op == Op::MaxPool;
  const Ints strides = pair_attr(g, n, "strides");
  const Ints dilations = max ? pair_attr(g, n, "dilations") : Ints{1, 1};
  if (!max && n.attrs.has("dilations") && pair_attr(g, n, "dilations") != Ints{1, 1})
    fail(g, n, "attribute dilations [" + join_ints(n.attrs.ints("dilations")) +
                   "] is not supported for AveragePool (opset 19); only 1, 1");
  Attributes a;
  a.values["kernel_shape"] = kernel;
  a.values["strides"] = strides;
  a.values["pads"] = spatial_pads(g, n, x, kernel, strides, dilations);
  a.values["ceil_mode"] = n.attrs.i("ceil_mode", 0);
  if (max) a.values["dilations"] = dilations;
  else a.values["count_include_pad"] = n.attrs.i("count_include_pad", 0);
  return first_output_only(respelled(n, n.op, {n.inputs[0]}, std::move(a)));
}

Node batchnorm(const Node& n, const Graph& g, const std::set<std::string>& used) {
  if (n.attrs.i("training_mode", 0) != 0) fail(g, n, "training_mode=1 is not supported (export the model in eval mode)");
  refuse_used_extra_outputs(g, n, used, "running statistics");
  for (std::size_t i = 1; i <= 4; ++i)
    if (!constant_input(g, n, i)) fail(g, n, "parameter '" + input(g, n, i) + "' must be a constant (initializer)");
  Attributes a;
  a.values["epsilon"] = n.attrs.f("epsilon", 1e-5f);
  return first_output_only(
      respelled(n, n.op, {n.inputs[0], n.inputs[1], n.inputs[2], n.inputs[3], n.inputs[4]}, std::move(a)));
}

float scalar_bound(const Graph& g, const Node& n, std::size_t index, const char* name, float fallback) {
  if (index < n.inputs.size() && !n.inputs[index].empty()) {
    const Tensor* t = constant_input(g, n, index);
    if (!t || t->elements() != 1) fail(g, n, std::string(name) + " ('" + n.inputs[index] + "') must be a constant scalar");
    return as_floats(*t)[0];
  }
  return n.attrs.f(name, fallback);
}

Node activation(const Node& n, const Graph& g) {
  Attributes a;
  if (n.op == Op::LeakyRelu) {
    a.values["alpha"] = n.attrs.f("alpha", 0.01f);
  } else if (n.op == Op::HardSigmoid) {
    a.values["alpha"] = n.attrs.f("alpha", 0.2f);
    a.values["beta"] = n.attrs.f("beta", 0.5f);
  } else if (n.op == Op::Clip) {
    a.values["min"] = scalar_bound(g, n, 1, "min", -std::numeric_limits<float>::infinity());
    a.values["max"] = scalar_bound(g, n, 2, "max", std::numeric_limits<float>::infinity());
  }
  return respelled(n, n.op, {input(g, n, 0)}, std::move(a));
}

Node binary(const Node& n, const Graph& g) {
  if (n.inputs.size() != 2) fail(g, n, "needs exactly two inputs");
  return respelled(n, n.op, {input(g, n, 0), input(g, n, 1)}, {});
}

Node reshape_to(const Node& n, const Shape& shape) {
  Attributes a;
  a.values["shape"] = Ints(shape);
  return respelled(n, Op::Reshape, {n.inputs[0]}, std::move(a));
}

Node flatten(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", 1), rank, true);
  const Shape outer(x.begin(), x.begin() + axis), inner(x.begin() + axis, x.end());
  return reshape_to(n, {element_count(outer), element_count(inner)});
}

Node reshape(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const Ints spec = constant_ints(g, n, 1, "the target shape");
  const bool allow_zero = n.attrs.i("allowzero", 0) != 0;
  Shape out(spec.size());
  std::int64_t inferred = -1, known = 1;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    std::int64_t d = spec[i];
    if (d == 0 && !allow_zero) {
      if (i >= x.size()) fail(g, n, "target shape [" + join_ints(spec) + "] copies dimension " + std::to_string(i) +
                                        " that the input " + to_string(x) + " lacks");
      d = x[i];
    }
    if (d == -1) {
      if (inferred >= 0) fail(g, n, "target shape [" + join_ints(spec) + "] has more than one -1");
      inferred = static_cast<std::int64_t>(i);
      continue;
    }
    if (d < 0) fail(g, n, "target shape [" + join_ints(spec) + "] has a negative dimension");
    out[i] = d;
    const auto product = checked_mul(known, d);
    if (!product) fail(g, n, "target shape [" + join_ints(spec) + "] has more elements than fit in 64 bits");
    known = *product;
  }
  if (inferred >= 0) {
    const std::int64_t total = element_count(x);
    if (known == 0 || total % known != 0)
      fail(g, n, "cannot reshape " + to_string(x) + " to [" + join_ints(spec) + "]");
    out[static_cast<std::size_t>(inferred)] = total / known;
  }
  return reshape_to(n, out);
}

Ints squeeze_axes(const Node& n, const Graph& g, bool& given) {
  given = true;
  if (n.attrs.has("axes")) return n.attrs.ints("axes");
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) return constant_ints(g, n, 1, "axes");
  given = false;
  return {};
}

Node squeeze(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  bool given = false;
  const Ints axes = squeeze_axes(n, g, given);
  std::vector<bool> drop(x.size(), false);
  for (std::size_t i = 0; i < x.size(); ++i) drop[i] = !given && x[i] == 1;
  for (auto axis : axes) {
    const auto a = static_cast<std::size_t>(normalize_axis(g, n, axis, static_cast<std::int64_t>(x.size())));
    if (x[a] != 1) fail(g, n, "cannot squeeze axis " + std::to_string(axis) + " of " + to_string(x) + " (not 1)");
    drop[a] = true;
  }
  Shape out;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!drop[i]) out.push_back(x[i]);
  return reshape_to(n, out);
}

Node unsqueeze(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  bool given = false;
  const Ints axes = squeeze_axes(n, g, given);
  if (!given) fail(g, n, "needs axes");
  const auto rank = static_cast<std::int64_t>(x.size() + axes.size());
  std::vector<bool> inserted(static_cast<std::size_t>(rank), false);
  for (auto axis : axes) {
    const auto a = static_cast<std::size_t>(normalize_axis(g, n, axis, rank));
    if (inserted[a]) fail(g, n, "axes [" + join_ints(axes) + "] repeat an axis");
    inserted[a] = true;
  }
  Shape out;
  std::size_t next = 0;
  for (std::int64_t i = 0; i < rank; ++i) out.push_back(inserted[static_cast<std::size_t>(i)] ? 1 : x[next++]);
  return reshape_to(n, out);
}

Node transpose(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  Ints perm(x.size());
  std::iota(perm.rbegin(), perm.rend(), 0);  // default: reverse the dimensions
  if (n.attrs.has("perm")) {
    perm = n.attrs.ints("perm");
    if (static_cast<std::int64_t>(perm.size()) != rank) fail(g, n, "perm [" + join_ints(perm) + "] does not match rank " + std::to_string(rank));
    for (auto& p : perm) p = normalize_axis(g, n, p, rank);
    Ints sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t i = 0; i < rank; ++i)
      if (sorted[static_cast<std::size_t>(i)] != i) fail(g, n, "perm [" + join_ints(perm) + "] is not a permutation");
  }
  // One that keeps the order of every dim longer than 1 moves no element: a Reshape (a view), as torch's
  // batch-1 exports of nn.MultiheadAttention ([1, S, E] <-> [S, 1, E]) leave around attention.
  std::int64_t last = -1;
  bool moves_data = false;
  for (std::size_t d = 0; d < perm.size(); ++d) {
    if (x[static_cast<std::size_t>(perm[d])] == 1) continue;
    moves_data = moves_data || perm[d] < last;
    last = perm[d];
  }
  if (!moves_data) {
    Shape out(perm.size());
    for (std::size_t d = 0; d < perm.size(); ++d) out[d] = x[static_cast<std::size_t>(perm[d])];
    return reshape_to(n, out);
  }
  Attributes a;
  a.values["perm"] = perm;
  return respelled(n, Op::Transpose, {n.inputs[0]}, std::move(a));
}

Node gemm(const Node& n, const Graph& g) {
  Attributes a;
  a.values["alpha"] = n.attrs.f("alpha", 1.f);
  a.values["beta"] = n.attrs.f("beta", 1.f);
  a.values["transA"] = n.attrs.i("transA", 0);
  a.values["transB"] = n.attrs.i("transB", 0);
  const std::string c = n.inputs.size() > 2 ? n.inputs[2] : "";
  return respelled(n, Op::Gemm, {input(g, n, 0), input(g, n, 1), c}, std::move(a));
}

Node concat(const Node& n, const Graph& g) {
  if (!n.attrs.has("axis")) fail(g, n, "needs attribute axis");
  const auto rank = static_cast<std::int64_t>(input_shape(g, n, 0).size());
  Attributes a;
  a.values["axis"] = normalize_axis(g, n, n.attrs.i("axis", 0), rank);
  return respelled(n, Op::Concat, n.inputs, std::move(a));
}

Node split(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", 0), static_cast<std::int64_t>(x.size()));
  const auto parts = static_cast<std::int64_t>(n.outputs.size());
  if (parts < 1) fail(g, n, "has no outputs");
  const bool split_input = n.inputs.size() > 1 && !n.inputs[1].empty();
  const std::int64_t dim = x[static_cast<std::size_t>(axis)];
  Ints sizes;
  if (n.attrs.has("num_outputs")) {  // opset 18: parts of ceil(dim / num_outputs), the last one smaller
    const std::int64_t count = n.attrs.i("num_outputs", 0);
    if (split_input || n.attrs.has("split")) fail(g, n, "takes split sizes or attribute num_outputs, not both");
    if (count != parts)
      fail(g, n, "num_outputs " + std::to_string(count) + " differs from its " + std::to_string(parts) + " outputs");
    const std::int64_t part = dim / parts + (dim % parts != 0);
    sizes.assign(static_cast<std::size_t>(parts), part);
    sizes.back() = dim - part * (parts - 1);
    if (sizes.back() < 1)
      fail(g, n, "num_outputs " + std::to_string(count) + " leaves an empty last part of dimension " +
                     std::to_string(dim) + ", which is not supported");
  } else if (n.attrs.has("split")) {
    sizes = n.attrs.ints("split");
  } else if (split_input) {
    sizes = constant_ints(g, n, 1, "split");
  } else {
    if (dim % parts != 0)
      fail(g, n, "cannot split dimension " + std::to_string(dim) + " into " + std::to_string(parts) + " equal parts");
    sizes.assign(static_cast<std::size_t>(parts), dim / parts);
  }
  if (static_cast<std::int64_t>(sizes.size()) != parts)
    fail(g, n, "split [" + join_ints(sizes) + "] does not give one size per output (" + std::to_string(parts) + ")");
  Attributes a;
  a.values["axis"] = axis;
  a.values["split"] = sizes;
  return respelled(n, Op::Split, {n.inputs[0]}, std::move(a));
}

// Per-dimension starts/ends/steps, clamped like the ONNX reference: for a negative step the end may be -1,
// meaning "through index 0".
Node slice(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const Ints starts = constant_ints(g, n, 1, "starts"), ends = constant_ints(g, n, 2, "ends");
  Ints axes(starts.size());
  std::iota(axes.begin(), axes.end(), 0);
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) axes = constant_ints(g, n, 3, "axes");
  Ints steps(starts.size(), 1);
  if (n.inputs.size() > 4 && !n.inputs[4].empty()) steps = constant_ints(g, n, 4, "steps");
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(g, n, "starts, ends, axes and steps differ in length");
  Ints full_starts(x.size(), 0), full_ends(x.begin(), x.end()), full_steps(x.size(), 1);
  std::vector<bool> seen(x.size(), false);
  for (std::size_t i = 0; i < starts.size(); ++i) {
    const auto axis = static_cast<std::size_t>(normalize_axis(g, n, axes[i], rank));
    if (seen[axis]) fail(g, n, "axes [" + join_ints(axes) + "] repeat an axis");
    seen[axis] = true;
    const std::int64_t step = steps[i], dim = x[axis];
    if (step == 0) fail(g, n, "a step of 0 is not allowed");
    std::int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < -dim ? -1 : s + dim;  // written so that INT64_MIN cannot overflow
    if (e < 0) e = e < -dim ? -1 : e + dim;
    if (step > 0) {
      s = std::clamp<std::int64_t>(s, 0, dim);
      e = std::clamp<std::int64_t>(e, 0, dim);
    } else {
      s = std::clamp<std::int64_t>(s, 0, dim - 1);
      e = std::clamp<std::int64_t>(e, -1, dim - 1);
    }
    full_starts[axis] = s;
    full_ends[axis] = e;
    full_steps[axis] = step;
  }
  Attributes a;
  a.values["starts"] = full_starts;
  a.values["ends"] = full_ends;
  a.values["steps"] = full_steps;
  return respelled(n, Op::Slice, {n.inputs[0]}, std::move(a));
}

Node softmax(const Node& n, const Graph& g) {
  const auto rank = static_cast<std::int64_t>(input_shape(g, n, 0).size());
  const bool legacy = g.opset < 13;  // before opset 13 (Log)Softmax flattens to 2-D at axis (default 1)
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", legacy ? 1 : -1), rank);
  Attributes a;
  a.values["axis"] = axis;
  a.values["coerce_2d"] = std::int64_t{legacy && axis != rank - 1};  // the last axis means the same either way
  return respelled(n, n.op, {n.inputs[0]}, std::move(a));  // Softmax or LogSoftmax
}

// ArgMax/ArgMin: axis non-negative, keepdims and select_last_index written out as 0 or 1.
Node arg_extreme(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  if (x.empty()) fail(g, n, "needs an input with at least one dimension");
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", 0), static_cast<std::int64_t>(x.size()));
  if (x[static_cast<std::size_t>(axis)] == 0) fail(g, n, "axis " + std::to_string(axis) + " of " + to_string(x) + " is empty");
  Attributes a;
  a.values["axis"] = axis;
  a.values["keepdims"] = std::int64_t{n.attrs.i("keepdims", 1) != 0};
  a.values["select_last_index"] = std::int64_t{n.attrs.i("select_last_index", 0) != 0};
  return respelled(n, n.op, {n.inputs[0]}, std::move(a));
}

// TopK: K from its (constant) input to attribute "k", in [1, the axis length]; largest and sorted written out.
Node top_k(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  if (x.empty()) fail(g, n, "needs an input with at least one dimension");
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", -1), static_cast<std::int64_t>(x.size()));
  const Ints k = constant_ints(g, n, 1, "K");
  const std::int64_t length = x[static_cast<std::size_t>(axis)];
  if (k.size() != 1 || k[0] < 1 || k[0] > length)
    fail(g, n, "K [" + join_ints(k) + "] must be one value in [1, " + std::to_string(length) + "] (axis " +
                   std::to_string(axis) + " of " + to_string(x) + ")");
  if (n.outputs.size() != 2) fail(g, n, "needs outputs Values and Indices");
  Attributes a;
  a.values["k"] = k[0];
  a.values["axis"] = axis;
  a.values["largest"] = std::int64_t{n.attrs.i("largest", 1) != 0};
  a.values["sorted"] = std::int64_t{n.attrs.i("sorted", 1) != 0};
  return respelled(n, n.op, {n.inputs[0]}, std::move(a));
}

// GatherElements: axis non-negative; indices of data's rank, no dimension longer than data's but the axis; constant
// indices checked against the axis at prepare time (run-time ones are the layers' business: nn/graph.hpp).
Node gather_elements(const Node& n, const Graph& g) {
  const Shape& data = input_shape(g, n, 0);
  const Shape& indices = input_shape(g, n, 1);
  const auto rank = static_cast<std::int64_t>(data.size());
  if (data.empty()) fail(g, n, "needs data with at least one dimension");
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", 0), rank);
  if (indices.size() != data.size())
    fail(g, n, "indices " + to_string(indices) + " must have the rank of data " + to_string(data));
  for (std::size_t d = 0; d < data.size(); ++d)
    if (static_cast<std::int64_t>(d) != axis && indices[d] > data[d])
      fail(g, n, "indices " + to_string(indices) + " are longer than data " + to_string(data) + " in dimension " +
                     std::to_string(d));
  if (const Tensor* t = constant_input(g, n, 1)) {
    const std::int64_t dim = data[static_cast<std::size_t>(axis)];
    if (t->type == ElementType::f32)
      for (float v : t->f32)
        if (v != std::floor(v)) fail(g, n, "index " + std::to_string(v) + " is not an integer");
    for (const std::int64_t i : as_ints(*t))
      if (i < -dim || i >= dim)
        fail(g, n, "index " + std::to_string(i) + " is out of range for axis " + std::to_string(axis) + " of " +
                       to_string(data));
  }
  Attributes a;
  a.values["axis"] = axis;
  return respelled(n, n.op, {n.inputs[0], input(g, n, 1)}, std::move(a));
}

// GridSample (opset 16; opset 20 spells bilinear "linear" and allows more dimensions, of which 4-D runs).
Node grid_sample(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const Shape& grid = input_shape(g, n, 1);
  if (x.size() != 4) fail(g, n, "needs a 4-D input [N, C, H, W], not " + to_string(x));
  if (grid.size() != 4 || grid[0] != x[0] || grid[3] != 2)
    fail(g, n, "grid " + to_string(grid) + " must be [N, H_out, W_out, 2] with N of the input " + to_string(x));
  std::string mode = n.attrs.s("mode", "bilinear");
  if (mode == "linear") mode = "bilinear";
  if (mode != "bilinear" && mode != "nearest")
    fail(g, n, "mode '" + mode + "' is not supported (bilinear, nearest)");
  const std::string padding = n.attrs.s("padding_mode", "zeros");
  if (padding != "zeros" && padding != "border" && padding != "reflection")
    fail(g, n, "padding_mode '" + padding + "' is not zeros, border or reflection");
  const std::int64_t align = n.attrs.i("align_corners", 0);
  if (align != 0 && align != 1) fail(g, n, "align_corners " + std::to_string(align) + " is not 0 or 1");
  Attributes a;
  a.values["mode"] = mode;
  a.values["padding_mode"] = padding;
  a.values["align_corners"] = align;
  return respelled(n, n.op, {n.inputs[0], input(g, n, 1)}, std::move(a));
}

// `scales` (empty when the model gave sizes) is kept as an attribute: ONNX maps coordinates with the model's
// own scales, which differ from sizes / input for non-integer ratios.
Node resize_node(const Node& n, const Graph& g, const Shape& x, const Shape& sizes, const std::vector<float>& scales,
                 std::string mode, std::string coordinates, std::string nearest) {
  if (mode != "nearest" && mode != "linear") fail(g, n, "mode '" + mode + "' is not supported (nearest, linear)");
  static const std::set<std::string> supported{"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                                               "tf_half_pixel_for_nn"};
  if (!supported.count(coordinates))
    fail(g, n, "coordinate_transformation_mode '" + coordinates +
                   "' is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nn)");
  static const std::set<std::string> nearest_modes{"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
  if (!nearest_modes.count(nearest)) fail(g, n, "nearest_mode '" + nearest + "' is not supported");
  if (sizes.size() != 4 || x.size() != 4)
    fail(g, n, "input " + to_string(x) + " and output size [" + join_ints(sizes) + "] must have 4 dimensions");
  if (sizes[0] != x[0] || sizes[1] != x[1])
    fail(g, n, "only H and W may be resized (input " + to_string(x) + ", output " + to_string(sizes) + ")");
  if (sizes[2] < 1 || sizes[3] < 1) fail(g, n, "output size " + to_string(sizes) + " is empty");
  Attributes a;
  a.values["sizes"] = Ints(sizes);
  if (!scales.empty()) a.values["scales"] = scales;
  a.values["mode"] = std::move(mode);
  a.values["coordinate_transformation_mode"] = std::move(coordinates);
  a.values["nearest_mode"] = std::move(nearest);
  return respelled(n, Op::Resize, {n.inputs[0]}, std::move(a));
}

Shape scaled(const Graph& g, const Node& n, const Shape& x, const std::vector<float>& scales) {
  if (scales.size() != x.size()) fail(g, n, "scales do not match the input rank " + std::to_string(x.size()));
  Shape out;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double size = std::floor(static_cast<double>(x[i]) * scales[i]);
    // NaN, infinite or out of int64's range (2^62: comfortably inside, and beyond any value's size limit).
    if (!(size >= 0 && size < 4.6e18))
      fail(g, n, "scale " + std::to_string(scales[i]) + " of dimension " + std::to_string(i) + " gives no valid size");
    out.push_back(static_cast<std::int64_t>(size));
  }
  return out;
}

Node resize(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  require_rank(g, n, x, 4, "only 4-D NCHW Resize is supported");
  const std::string coordinates = n.attrs.s("coordinate_transformation_mode", "half_pixel");
  if (coordinates == "tf_crop_and_resize") fail(g, n, "coordinate_transformation_mode tf_crop_and_resize is not supported");
  if (n.attrs.i("exclude_outside", 0) != 0) fail(g, n, "exclude_outside=1 is not supported");
  // Opset 18: sizes and scales for the dimensions in attribute axes only (the others keep their size).
  const bool has_axes = n.attrs.has("axes");
  const Ints axes = has_axes ? unique_axes(g, n, n.attrs.ints("axes"), 4) : Ints{};
  Shape sizes;
  std::vector<float> scales;
  if (const Tensor* s = optional_constant(g, n, 3, "sizes")) {
    const std::string policy = n.attrs.s("keep_aspect_ratio_policy", "stretch");
    if (policy != "stretch")
      fail(g, n, "keep_aspect_ratio_policy '" + policy + "' is not supported (only stretch)");
    sizes = has_axes ? spread_over_axes(g, n, as_ints(*s), axes, 1, Ints(x), "sizes") : as_ints(*s);
  } else if (const Tensor* s = optional_constant(g, n, 2, "scales")) {
    scales = has_axes ? spread_over_axes(g, n, as_floats(*s), axes, 1, std::vector<float>(4, 1.f), "scales")
                      : as_floats(*s);
    sizes = scaled(g, n, x, scales);
  } else {
    fail(g, n, "needs scales or sizes");
  }
  const std::string mode = n.attrs.s("mode", "nearest");
  // Opset 18's antialias widens the linear filter by 1 / scale where the image shrinks; growing, or nearest, it
  // changes nothing.
  if (n.attrs.i("antialias", 0) != 0 && mode != "nearest" && sizes.size() == 4 && (sizes[2] < x[2] || sizes[3] < x[3]))
    fail(g, n, "antialias=1 is not supported when it shrinks the image (mode " + mode + ", input " + to_string(x) +
                   ", output " + to_string(sizes) + ")");
  return resize_node(n, g, x, sizes, scales, mode, coordinates, n.attrs.s("nearest_mode", "round_prefer_floor"));
}

// Upsample (deprecated) is Resize with asymmetric coordinates and floor rounding.
Node upsample(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  require_rank(g, n, x, 4, "only 4-D NCHW Upsample is supported");
  std::vector<float> scales = n.attrs.floats("scales");
  if (const Tensor* s = optional_constant(g, n, 1, "scales")) scales = as_floats(*s);
  std::string mode = n.attrs.s("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  return resize_node(n, g, x, scaled(g, n, x, scales), scales, mode, "asymmetric", "floor");
}

Node pad(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  Ints pads = n.attrs.has("pads") ? n.attrs.ints("pads") : constant_ints(g, n, 1, "pads");
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) {  // opset 18: pads for these axes only, the others 0
    const Ints axes = unique_axes(g, n, constant_ints(g, n, 3, "axes"), static_cast<std::int64_t>(x.size()));
    pads = spread_over_axes(g, n, pads, axes, 2, Ints(2 * x.size(), 0), "pads [" + join_ints(pads) + "]");
  }
  if (pads.size() != 2 * x.size())
    fail(g, n, "pads [" + join_ints(pads) + "] must hold 2 values per dimension of " + to_string(x));
  float value = n.attrs.f("value", 0.f);
  if (const Tensor* v = optional_constant(g, n, 2, "constant_value")) {
    if (v->elements() != 1) fail(g, n, "constant_value must hold one value");
    value = as_floats(*v)[0];
  }
  const std::string mode = n.attrs.s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    fail(g, n, "mode '" + mode + "' is not supported (constant, reflect, edge)");
  Attributes a;
  a.values["pads"] = pads;
  a.values["mode"] = mode;
  a.values["value"] = value;
  return respelled(n, Op::Pad, {n.inputs[0]}, std::move(a));
}

// ReduceMean/Sum/Max/Min/L2: axes from the attribute (opset < 18; ReduceSum < 13) or the second input, sorted,
// non-negative and unique; no axes means all of them, unless noop_with_empty_axes makes the node a copy.
Node reduce(const Node& n, const Graph& g) {
  const Shape& x = input_shape(g, n, 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  Ints axes;
  if (n.attrs.has("axes")) axes = n.attrs.ints("axes");
  else if (const Tensor* t = optional_constant(g, n, 1, "axes")) axes = as_ints(*t);
  if (axes.empty() && n.attrs.i("noop_with_empty_axes", 0) != 0) return reshape_to(n, x);
  if (axes.empty()) {
    axes.resize(x.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (auto& a : axes) a = normalize_axis(g, n, a, rank);
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) fail(g, n, "axes [" + join_ints(axes) + "] repeat an axis");
  for (auto a : axes)
    if (x[static_cast<std::size_t>(a)] == 0) fail(g, n, "reduces the empty axis " + std::to_string(a) + " of " + to_string(x));
  Attributes attrs;
  attrs.values["axes"] = axes;
  attrs.values["keepdims"] = std::int64_t{n.attrs.i("keepdims", 1) != 0};
  return respelled(n, n.op, {input(g, n, 0)}, std::move(attrs));
}

// LayerNormalization (opset 17): Scale and B constants that broadcast to the normalized dimensions; the optional
// Mean and InvStdDev outputs only while nothing reads them.
Node layer_normalization(const Node& n, const Graph& g, const std::set<std::string>& used) {
  refuse_used_extra_outputs(g, n, used, "the mean or inverse standard deviation");
  const Shape& x = input_shape(g, n, 0);
  const auto rank = static_cast<std::int64_t>(x.size());
  const std::int64_t axis = normalize_axis(g, n, n.attrs.i("axis", -1), rank);
  const Shape normalized(x.begin() + axis, x.end());
  std::vector<std::string> inputs{input(g, n, 0)};
  for (std::size_t i = 1; i <= 2; ++i) {
    const char* role = i == 1 ? "scale" : "bias";
    const Tensor* t = i == 1 ? constant_input(g, n, 1) : optional_constant(g, n, 2, role);
    if (i == 1 && !t) fail(g, n, "scale ('" + input(g, n, 1) + "') must be a constant, known before running");
    if (t && (t->type != ElementType::f32 || t->shape.size() > normalized.size() ||
              !std::equal(t->shape.rbegin(), t->shape.rend(), normalized.rbegin(),
                          [](std::int64_t s, std::int64_t d) { return s == 1 || s == d; })))
      fail(g, n, std::string(role) + " of shape " + to_string(t->shape) + " does not broadcast to the normalized " +
                     "dimensions " + to_string(normalized));
    inputs.push_back(t ? n.inputs[i] : "");
  }
  Attributes attrs;
  attrs.values["axis"] = axis;
  attrs.values["epsilon"] = n.attrs.f("epsilon", 1e-5f);
  return first_output_only(respelled(n, n.op, std::move(inputs), std::move(attrs)));
}

// Max and Min take any number of inputs in ONNX; two are what the backends combine.
Node binary_variadic(const Node& n, const Graph& g) {
  if (n.inputs.size() != 2) fail(g, n, "has " + std::to_string(n.inputs.size()) + " inputs; only two are supported");
  return binary(n, g);
}

// Ops that only ever run at prepare time: their data must already be constant.
Node prepare_time_only(const Node& n, const Graph& g) {
  for (std::size_t i = 0; i < n.inputs.size(); ++i)
    if (!n.inputs[i].empty() && !g.is_constant(n.inputs[i]))
      fail(g, n, "input '" + n.inputs[i] + "' is computed at run time; " + op_name(n.op) +
                     " is only supported on constants and shapes (folded before running)");
  return n;
}

}  // namespace

Node canonicalize(const Node& node, const Graph& g, const std::set<std::string>& used) {
  const Op op = node.op;
  if (op == Op::Conv) return conv(node, g);
  if (op == Op::ConvTranspose) return conv_transpose(node, g);
  if (op == Op::MaxPool || op == Op::AveragePool) return pool(node, g, used);
  if (op == Op::BatchNormalization) return batchnorm(node, g, used);
  if (is_activation(op))
    return activation(node, g);
  if (binary_math_of(op))  // Max and Min: any number of inputs in ONNX
    return op_info(op).max_inputs == kManyInputs ? binary_variadic(node, g) : binary(node, g);
  if (unary_math_of(op)) return respelled(node, op, {input(g, node, 0)}, {});
  if (reduce_math_of(op)) return reduce(node, g);
  if (op == Op::LayerNormalization) return layer_normalization(node, g, used);
  if (op == Op::GlobalAveragePool) {
    if (input_shape(g, node, 0).size() < 3) fail(g, node, "needs an N,C,spatial... input");
    return respelled(node, op, {node.inputs[0]}, {});
  }
  if (op == Op::Flatten) return flatten(node, g);
  if (op == Op::Reshape) return reshape(node, g);
  if (op == Op::Squeeze) return squeeze(node, g);
  if (op == Op::Unsqueeze) return unsqueeze(node, g);
  if (op == Op::Transpose) return transpose(node, g);
  if (op == Op::Gemm) return gemm(node, g);
  if (op == Op::MatMul) return binary(node, g);
  if (op == Op::Concat) return concat(node, g);
  if (op == Op::Split) return split(node, g);
  if (op == Op::Slice) return slice(node, g);
  if (op == Op::Softmax || op == Op::LogSoftmax) return softmax(node, g);
  if (op == Op::ArgMax || op == Op::ArgMin) return arg_extreme(node, g);
  if (op == Op::TopK) return top_k(node, g);
  if (op == Op::GatherElements) return gather_elements(node, g);
  if (op == Op::GridSample) return grid_sample(node, g);
  if (op == Op::Resize) return resize(node, g);
  if (op == Op::Upsample) return upsample(node, g);
  if (op == Op::Pad) return pad(node, g);
  if (op == Op::Gather || op == Op::ConstantOfShape || op == Op::Cast || op == Op::Equal || op == Op::Less ||
      op == Op::Greater || op == Op::LessOrEqual || op == Op::GreaterOrEqual || op == Op::And || op == Op::Or || op == Op::Not ||
      op == Op::Where || op == Op::Expand || op == Op::Range || op == Op::Mod || op == Op::ScatterND)
    return prepare_time_only(node, g);
  fail(g, node, "operator " + op_name(op) + " has no prepared form");
}

}  // namespace sluice::nn::passes
