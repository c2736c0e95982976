// Ops that are other ops in disguise, rewritten into them so that the backends need nothing new:
//   DepthToSpace, SpaceToDepth  -> Reshape (6-D), Transpose, Reshape
//   Tile                        -> Reshape, Mul by a constant of ones that broadcasts each repeat, Reshape
//   InstanceNormalization       -> LayerNormalization over the spatial dims (scale 1), BatchNormalization as the
//                                  per-channel scale and bias (mean 0, variance 1, epsilon 0)
//   GroupNormalization          -> Reshape to [N, groups, rest], LayerNormalization over the rest (scale 1),
//                                  Reshape back, BatchNormalization as InstanceNormalization's
//   Expand of run-time data     -> Mul by a constant of ones (or nothing, when the shape stays)
// The parts are written in ONNX spelling; the sweep canonicalizes them (or folds them, on constants) like any node.
#include <algorithm>
#include <optional>

#include "nn/passes/pass_support.hpp"
#include "runtime/checked_math.hpp"

namespace sluice::nn::passes {
namespace {

using Ints = std::vector<std::int64_t>;

class Parts {
 public:
  Parts(const Node& whole, Graph& g) : whole_(whole), g_(g) {}

  // A new constant named after the node's output; a name the graph already has is an error, not a silent reuse.
  std::string constant(const std::string& role, Tensor t) {
    const std::string name = whole_.outputs.at(0) + "/" + role;
    if (g_.constants.count(name) || g_.shapes.count(name)) fail(g_, whole_, "value '" + name + "' exists already");
    g_.constants[name] = std::move(t);
    return name;
  }
  std::string ints(const std::string& role, Ints values) {
    Tensor t;
    t.type = ElementType::i64;
    t.shape = {static_cast<std::int64_t>(values.size())};
    t.i64 = std::move(values);
    return constant(role, std::move(t));
  }
  std::string filled(const std::string& role, ElementType type, const Shape& shape, float value) {
    Tensor t;
    t.type = type;
    t.shape = shape;
    const auto n = static_cast<std::size_t>(element_count(shape));
    if (type == ElementType::f32) t.f32.assign(n, value);
    else t.i64.assign(n, static_cast<std::int64_t>(value));
    return constant(role, std::move(t));
  }

  // Adds a part reading `inputs`; its output is the whole node's when `last`, else a new value. Returns it.
  std::string add(Op op, const std::string& role, std::vector<std::string> inputs, bool last = false,
                  Attributes attrs = {}) {
    Node n;
    n.name = whole_.name + "/" + role;
    n.op = op;
    n.inputs = std::move(inputs);
    n.outputs = {last ? whole_.outputs.at(0) : whole_.outputs.at(0) + "/" + role};
    if (!last && (g_.constants.count(n.outputs[0]) || g_.shapes.count(n.outputs[0])))
      fail(g_, whole_, "value '" + n.outputs[0] + "' exists already");
    n.attrs = std::move(attrs);
    nodes_.push_back(std::move(n));
    return nodes_.back().outputs[0];
  }
  std::string reshape(const std::string& role, const std::string& x, const Shape& to, bool last = false) {
    return add(Op::Reshape, role, {x, ints(role + "_shape", to)}, last);
  }

  std::vector<Node> take() { return std::move(nodes_); }

 private:
  const Node& whole_;
  Graph& g_;
  std::vector<Node> nodes_;
};

std::int64_t block_size(const Graph& g, const Node& n, const Shape& x) {
  if (x.size() != 4) fail(g, n, "needs a 4-D NCHW input, not " + to_string(x));
  if (!n.attrs.has("blocksize")) fail(g, n, "needs attribute blocksize");
  const std::int64_t b = n.attrs.i("blocksize", 0);
  if (b < 1 || b > (std::int64_t{1} << 20)) fail(g, n, "blocksize " + std::to_string(b) + " must be in [1, 2^20]");
  return b;
}

// DCR (the default): channels are read as [blocksize, blocksize, C'] (depth, column, row); CRD as [C', bs, bs].
std::vector<Node> depth_to_space(const Node& n, Graph& g) {
  const Shape x = g.shape_of(n.inputs.at(0));
  const std::int64_t b = block_size(g, n, x), N = x[0], C = x[1], H = x[2], W = x[3];
  const std::string mode = n.attrs.s("mode", "DCR");
  if (mode != "DCR" && mode != "CRD") fail(g, n, "mode '" + mode + "' is not DCR or CRD");
  if (C % (b * b) != 0)
    fail(g, n, "channels " + std::to_string(C) + " are not divisible by blocksize^2 = " + std::to_string(b * b));
  const std::int64_t c = C / (b * b);
  Parts p(n, g);
  Attributes perm;
  std::string blocks;
  if (mode == "DCR") {
    blocks = p.reshape("blocks", n.inputs[0], {N, b, b, c, H, W});
    perm.values["perm"] = Ints{0, 3, 4, 1, 5, 2};
  } else {
    blocks = p.reshape("blocks", n.inputs[0], {N, c, b, b, H, W});
    perm.values["perm"] = Ints{0, 1, 4, 2, 5, 3};
  }
  const std::string moved = p.add(Op::Transpose, "transpose", {blocks}, false, std::move(perm));
  p.reshape("space", moved, {N, c, H * b, W * b}, true);
  return p.take();
}

std::vector<Node> space_to_depth(const Node& n, Graph& g) {
  const Shape x = g.shape_of(n.inputs.at(0));
  const std::int64_t b = block_size(g, n, x), N = x[0], C = x[1], H = x[2], W = x[3];
  if (H % b != 0 || W % b != 0)
    fail(g, n, "height and width of " + to_string(x) + " are not divisible by blocksize " + std::to_string(b));
  Parts p(n, g);
  const std::string blocks = p.reshape("blocks", n.inputs[0], {N, C, H / b, b, W / b, b});
  Attributes perm;
  perm.values["perm"] = Ints{0, 3, 5, 1, 2, 4};
  const std::string moved = p.add(Op::Transpose, "transpose", {blocks}, false, std::move(perm));
  p.reshape("depth", moved, {N, C * b * b, H / b, W / b}, true);
  return p.take();
}

// Tile: every dimension d with r > 1 repeats gets a new axis of r in front of it (x: 1, ones: r), so a broadcast
// Mul by ones writes the copies and a Reshape merges each pair (r, d) into r * d. A dimension of 1 repeats by
// broadcasting alone; runs of unrepeated dimensions after the first merge, keeping the rank low; where it would
// still pass kMaxTileRank, the node becomes two Tiles (each rewritten in turn). x * 1 is exact in every
// precision, NaN and infinities included.
constexpr std::size_t kMaxTileRank = 6;  // the CUDA backend's kMaxRank
std::vector<Node> tile(const Node& n, Graph& g) {
  const std::string& data = n.inputs.at(0);
  const Shape x = g.shape_of(data);
  const Tensor* r = constant_input(g, n, 1);
  if (!r) fail(g, n, "repeats ('" + n.inputs.at(1) + "') must be a constant, known before running");
  const Ints repeats = as_ints(*r);
  if (repeats.size() != x.size())
    fail(g, n, "repeats [" + join_ints(repeats) + "] must hold one value per dimension of " + to_string(x));
  const bool constant_data = g.is_constant(data);
  Shape x_parts, ones_parts, out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const std::int64_t times = repeats[d];
    if (times < 0) fail(g, n, "repeats [" + join_ints(repeats) + "] has a negative value");
    if (times == 0 && !constant_data) fail(g, n, "repeats [" + join_ints(repeats) + "] make an empty tensor, which is not supported");
    const auto extent = checked_mul(x[d], times);
    if (!extent) fail(g, n, "repeats [" + join_ints(repeats) + "] of " + to_string(x) + " overflow 64 bits");
    out.push_back(*extent);
    if (times == 1) {
      const bool merge = d > 1 && repeats[d - 1] == 1;  // never into the batch dimension
      if (merge) x_parts.back() *= x[d];
      else {
        x_parts.push_back(x[d]);
        ones_parts.push_back(1);
      }
    } else if (x[d] == 1) {
      x_parts.push_back(1);
      ones_parts.push_back(times);
    } else {
      x_parts.insert(x_parts.end(), {1, x[d]});
      ones_parts.insert(ones_parts.end(), {times, 1});
    }
  }
  check_value_shape(g, n, n.outputs.at(0), out);
  if (x_parts.size() > kMaxTileRank) {  // two Tiles: the last repeated dimension after the others (one exists:
    // without repeats the parts merge to at most two)
    const auto last = static_cast<std::size_t>(
        std::distance(std::find_if(repeats.rbegin(), repeats.rend(), [](std::int64_t r) { return r != 1; }), repeats.rend()) - 1);
    Ints first = repeats, second(repeats.size(), 1);
    first[last] = 1;
    second[last] = repeats[last];
    Parts p(n, g);
    const std::string mid = p.add(Op::Tile, "tile_others", {data, p.ints("repeats_others", first)});
    p.add(Op::Tile, "tile_last", {mid, p.ints("repeats_last", second)}, true);
    return p.take();
  }
  if (element_count(ones_parts) > kMaxFoldedElements)
    fail(g, n, "repeats [" + join_ints(repeats) + "] need a constant of ones with more than " +
                   std::to_string(kMaxFoldedElements) + " elements");
  Parts p(n, g);
  const ElementType type = constant_data ? g.constants.at(data).type : ElementType::f32;
  const std::string spread = p.reshape("spread", data, x_parts);
  const std::string copies = p.add(Op::Mul, "copies", {spread, p.filled("ones", type, ones_parts, 1.f)});
  p.reshape("tiled", copies, out, true);
  return p.take();
}

// Expand of run-time data (torch's `repeat` writes Expand(x, ones) before its Tile): a Mul by ones shaped like the
// target along the dimensions that grow and 1 elsewhere, or nothing (an Identity, which the sweep removes) when
// the shape does not change. Expand of constants folds as before.
std::vector<Node> expand(const Node& n, Graph& g) {
  const Shape x = g.shape_of(n.inputs.at(0));
  const Tensor* target = constant_input(g, n, 1);
  if (!target) fail(g, n, "the shape ('" + n.inputs.at(1) + "') must be a constant, known before running");
  const Ints shape = as_ints(*target);
  const std::size_t rank = std::max(x.size(), shape.size());
  Shape out(rank), ones(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::int64_t have = d < rank - x.size() ? 1 : x[d - (rank - x.size())];
    const std::int64_t want = d < rank - shape.size() ? 1 : shape[d - (rank - shape.size())];
    if (have != want && have != 1 && want != 1)
      fail(g, n, "input " + to_string(x) + " does not broadcast to [" + join_ints(shape) + "]");
    out[d] = have == 1 ? want : have;
    ones[d] = have == out[d] ? 1 : out[d];
  }
  if (std::any_of(out.begin(), out.end(), [](std::int64_t d) { return d < 1; }))
    fail(g, n, "the shape [" + join_ints(shape) + "] makes an empty or negative dimension, which is not supported");
  check_value_shape(g, n, n.outputs.at(0), out);
  Parts p(n, g);
  if (out == x) {
    p.add(Op::Identity, "same", {n.inputs[0]}, true);
    return p.take();
  }
  if (element_count(ones) > kMaxFoldedElements)
    fail(g, n, "expanding to [" + join_ints(shape) + "] needs a constant of ones with more than " +
                   std::to_string(kMaxFoldedElements) + " elements");
  p.add(Op::Mul, "copies", {n.inputs[0], p.filled("ones", ElementType::f32, ones, 1.f)}, true);
  return p.take();
}

// The constant scale (i = 1) or bias (i = 2) of a normalization: one floating point value per `per` (`count` of
// them: channels, or GroupNormalization's groups before opset 21).
const Tensor& norm_parameter(const Graph& g, const Node& n, std::size_t i, std::int64_t count, const char* per) {
  const Tensor* t = constant_input(g, n, i);
  const std::string role = i == 1 ? "scale" : n.op == Op::InstanceNormalization ? "B" : "bias";
  if (!t) fail(g, n, role + " ('" + n.inputs.at(i) + "') must be a constant, known before running");
  if (t->type != ElementType::f32 || t->elements() != count)
    fail(g, n, role + " " + to_string(t->shape) + " must hold one floating point value per " + per + " (" +
                   std::to_string(count) + ")");
  return *t;
}

// `normalized` (shaped like the node's input x) times scale[c] plus bias[c]: a BatchNormalization with mean 0,
// variance 1 and epsilon 0, the node's output.
void channel_affine(Parts& p, const std::string& normalized, const Shape& x, const std::string& scale,
                    const std::string& bias) {
  Attributes affine;
  affine.values["epsilon"] = 0.f;
  p.add(Op::BatchNormalization, "affine",
        {normalized, scale, bias, p.filled("zero_mean", ElementType::f32, {x[1]}, 0.f),
         p.filled("unit_variance", ElementType::f32, {x[1]}, 1.f)},
        true, std::move(affine));
}

// LayerNormalization of `x` over its dimensions from `axis` on, with the node's epsilon and scale 1.
std::string normalized_from(Parts& p, const Node& n, const std::string& x, std::int64_t axis) {
  Attributes norm;
  norm.values["axis"] = axis;
  norm.values["epsilon"] = n.attrs.f("epsilon", 1e-5f);
  return p.add(Op::LayerNormalization, "normalize", {x, p.filled("unit_scale", ElementType::f32, {1}, 1.f)}, false,
               std::move(norm));
}

// InstanceNormalization: each (n, c) plane normalized over its spatial elements, then x * scale[c] + B[c].
std::vector<Node> instance_normalization(const Node& n, Graph& g) {
  const Shape x = g.shape_of(n.inputs.at(0));
  if (x.size() < 3) fail(g, n, "needs an N,C,spatial... input, not " + to_string(x));
  for (std::size_t i = 1; i <= 2; ++i) norm_parameter(g, n, i, x[1], "channel");
  Parts p(n, g);
  channel_affine(p, normalized_from(p, n, n.inputs[0], 2), x, n.inputs[1], n.inputs[2]);
  return p.take();
}

// GroupNormalization: the C channels in num_groups groups of C / num_groups, each (n, group) normalized over all
// its elements, then x * scale[c] + bias[c]. Opsets 18-20 give scale and bias per group (channel c takes its
// group's), opset 21 per channel. stash_type (opset 21: the precision of the statistics) must be float, which is
// what LayerNormalization computes them in.
std::vector<Node> group_normalization(const Node& n, Graph& g) {
  const Shape x = g.shape_of(n.inputs.at(0));
  if (x.size() < 2) fail(g, n, "needs an N,C,... input, not " + to_string(x));
  if (!n.attrs.has("num_groups")) fail(g, n, "needs attribute num_groups");
  const std::int64_t groups = n.attrs.i("num_groups", 0), channels = x[1];
  if (groups < 1 || channels < groups || channels % groups != 0)
    fail(g, n, "num_groups " + std::to_string(groups) + " does not divide the " + std::to_string(channels) +
                   " channels of " + to_string(x));
  if (const std::int64_t stash = n.attrs.i("stash_type", 1); stash != 1)
    fail(g, n, "stash_type " + std::to_string(stash) + " is not supported (only 1: statistics in float)");
  const bool per_channel = g.opset >= 21;
  const std::int64_t count = per_channel ? channels : groups, group_channels = channels / groups;
  const char* per = per_channel ? "channel (opset 21)" : "group (opsets 18-20)";
  const Tensor& scale = norm_parameter(g, n, 1, count, per);
  const Tensor& bias = norm_parameter(g, n, 2, count, per);
  Parts p(n, g);
  auto per_channel_of = [&](const std::string& role, const Tensor& per_group) {
    Tensor t;
    t.shape = {channels};
    for (std::int64_t c = 0; c < channels; ++c) t.f32.push_back(per_group.f32[static_cast<std::size_t>(c / group_channels)]);
    return p.constant(role, std::move(t));
  };
  const Shape grouped_shape{x[0], groups, group_channels * element_count(Shape(x.begin() + 2, x.end()))};
  const std::string grouped = p.reshape("groups", n.inputs[0], grouped_shape);
  const std::string back = p.reshape("channels", normalized_from(p, n, grouped, 2), x);
  channel_affine(p, back, x, per_channel ? n.inputs[1] : per_channel_of("channel_scale", scale),
                 per_channel ? n.inputs[2] : per_channel_of("channel_bias", bias));
  return p.take();
}

}  // namespace

std::optional<std::vector<Node>> decompose(const Node& node, Graph& g) {
  if (node.op == Op::DepthToSpace) return depth_to_space(node, g);
  if (node.op == Op::SpaceToDepth) return space_to_depth(node, g);
  if (node.op == Op::Tile) return tile(node, g);
  if (node.op == Op::InstanceNormalization) return instance_normalization(node, g);
  if (node.op == Op::GroupNormalization) return group_normalization(node, g);
  if (node.op == Op::Expand && !g.is_constant(node.inputs.at(0))) return expand(node, g);
  return std::nullopt;
}

}  // namespace sluice::nn::passes
