// Ops that are other ops in disguise, rewritten into them so that the backends need nothing new:
//   DepthToSpace, SpaceToDepth  -> Reshape (6-D), Transpose, Reshape
//   Tile                        -> Reshape, Mul by a constant of ones that broadcasts each repeat, Reshape
//   InstanceNormalization       -> LayerNormalization over the spatial dims (scale 1), BatchNormalization as the
//                                  per-channel scale and bias (mean 0, variance 1, epsilon 0)
//   GroupNormalization          -> Reshape to [N, groups, rest], LayerNormalization over the rest (scale 1),
//                                  Reshape back, BatchNormalization as InstanceNormalization's
//   Expand of run-time data     -> Mul by a constant of ones (or nothing, when the shape stays)
//   Einsum                      -> ReduceSum of indices only one operand has, Transpose/Reshape to
//                                  [batch, M, K] x [batch, K, N], MatMul (Mul when nothing is contracted),
//                                  Reshape/Transpose to the output; operands pairwise, left to right
// The parts are written in ONNX spelling; the sweep canonicalizes them (or folds them, on constants) like any node.
#include <algorithm>
#include <map>
#include <optional>
#include <set>

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

// ---- Einsum ----------------------------------------------------------------------------------------------
// The equation is hostile input: at most kMaxEquation characters, letters, ',', one "->", "..." and spaces only.
// Indices are numbered 0-25 ('A'-'Z'), 26-51 ('a'-'z': so numeric order is the implicit output's ASCII order)
// and from kEllipsis on the dimensions an ellipsis covers (right-aligned across operands, as numpy broadcasts).
constexpr std::size_t kMaxEquation = 1024;
constexpr int kEllipsis = 52;

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;
  std::vector<int> output;
  std::map<int, std::int64_t> size;  // each index's extent (the largest where an ellipsis dim broadcasts)
};

std::string index_name(int label) {
  if (label >= kEllipsis) return "... dim " + std::to_string(label - kEllipsis);
  return std::string(1, static_cast<char>(label < 26 ? 'A' + label : 'a' + (label - 26)));
}

// One term ("bhqd", "...ij"): its letters, and where its ellipsis stands (-1: none).
struct Term {
  std::vector<int> letters;
  int ellipsis_at = -1;
};

EinsumSpec parse_einsum(const Graph& g, const Node& n, const std::vector<Shape>& shapes) {
  if (!n.attrs.has("equation")) fail(g, n, "needs attribute equation");
  const std::string equation = n.attrs.s("equation", "");
  auto refuse = [&](const std::string& why) -> void { fail(g, n, "equation '" + equation + "': " + why); };
  if (equation.size() > kMaxEquation)
    fail(g, n, "the equation is longer than " + std::to_string(kMaxEquation) + " characters");
  std::string eq;
  for (std::size_t i = 0; i < equation.size(); ++i) {
    const char c = equation[i];
    if (c == ' ') continue;
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!letter && c != ',' && c != '.' && c != '-' && c != '>')
      fail(g, n, "equation has a character (code " + std::to_string(static_cast<unsigned char>(c)) + ") at position " +
                     std::to_string(i) + " that is not a letter, ',', '->', '...' or a space");
    eq += c;
  }
  const std::size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  const bool explicit_output = arrow != std::string::npos;
  const std::string rhs = explicit_output ? eq.substr(arrow + 2) : "";
  if (lhs.find_first_of("->") != std::string::npos || rhs.find_first_of("->,") != std::string::npos)
    refuse("'-' and '>' only as one '->', and ',' only between inputs");
  auto parse_term = [&](const std::string& text, const std::string& what) {
    Term t;
    for (std::size_t i = 0; i < text.size();) {
      const char c = text[i];
      if (c == '.') {
        if (text.compare(i, 3, "...") != 0 || t.ellipsis_at >= 0) refuse(what + " has a '.' that is not one '...'");
        t.ellipsis_at = static_cast<int>(t.letters.size());
        i += 3;
        continue;
      }
      t.letters.push_back(c <= 'Z' ? c - 'A' : 26 + (c - 'a'));
      ++i;
    }
    return t;
  };
  std::vector<Term> terms;
  for (std::size_t start = 0;;) {
    const std::size_t comma = lhs.find(',', start);
    terms.push_back(parse_term(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start),
                               "input " + std::to_string(terms.size())));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != shapes.size())
    refuse("names " + std::to_string(terms.size()) + " inputs, the node has " + std::to_string(shapes.size()));
  EinsumSpec spec;
  std::size_t widest = 0;  // dims under the widest ellipsis
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const std::size_t rank = shapes[i].size(), letters = terms[i].letters.size();
    if (terms[i].ellipsis_at < 0 ? letters != rank : letters > rank)
      refuse("input " + std::to_string(i) + " has " + std::to_string(letters) + " indices" +
             (terms[i].ellipsis_at < 0 ? "" : " and '...'") + " for shape " + to_string(shapes[i]));
    if (terms[i].ellipsis_at >= 0) widest = std::max(widest, rank - letters);
  }
  auto note_size = [&](int label, std::int64_t extent, std::size_t input) {
    auto [it, fresh] = spec.size.emplace(label, extent);
    if (fresh || it->second == extent) return;
    if (label >= kEllipsis && (it->second == 1 || extent == 1)) {  // broadcasting under the ellipsis
      it->second = std::max(it->second, extent);
      return;
    }
    refuse("index " + index_name(label) + " is " + std::to_string(it->second) + " long in one input and " +
           std::to_string(extent) + " in input " + std::to_string(input));
  };
  std::map<int, int> uses;
  for (std::size_t i = 0; i < terms.size(); ++i) {
    const Term& t = terms[i];
    const std::size_t covered = shapes[i].size() - t.letters.size();
    std::vector<int> labels;
    for (std::size_t k = 0; k <= t.letters.size(); ++k) {
      if (static_cast<int>(k) == t.ellipsis_at)
        for (std::size_t e = 0; e < covered; ++e) labels.push_back(kEllipsis + static_cast<int>(widest - covered + e));
      if (k < t.letters.size()) labels.push_back(t.letters[k]);
    }
    std::set<int> seen;
    for (std::size_t d = 0; d < labels.size(); ++d) {
      if (!seen.insert(labels[d]).second)
        refuse("index " + index_name(labels[d]) + " repeats in input " + std::to_string(i) +
               " (a diagonal), which is not supported");
      note_size(labels[d], shapes[i][d], i);
      ++uses[labels[d]];
    }
    spec.inputs.push_back(std::move(labels));
  }
  if (explicit_output) {
    const Term t = parse_term(rhs, "the output");
    if (t.ellipsis_at < 0 && widest > 0) refuse("an ellipsis in the inputs needs one in the output");
    for (std::size_t k = 0; k <= t.letters.size(); ++k) {
      if (static_cast<int>(k) == t.ellipsis_at)
        for (std::size_t e = 0; e < widest; ++e) spec.output.push_back(kEllipsis + static_cast<int>(e));
      if (k < t.letters.size()) {
        const int label = t.letters[k];
        if (!uses.count(label)) refuse("output index " + index_name(label) + " is in no input");
        if (std::find(spec.output.begin(), spec.output.end(), label) != spec.output.end())
          refuse("output index " + index_name(label) + " repeats");
        spec.output.push_back(label);
      }
    }
  } else {  // numpy's implicit output: the ellipsis dims, then the indices used once, in ASCII order
    for (std::size_t e = 0; e < widest; ++e) spec.output.push_back(kEllipsis + static_cast<int>(e));
    for (const auto& [label, count] : uses)
      if (label < kEllipsis && count == 1) spec.output.push_back(label);
  }
  return spec;
}

// A value in the making, with the index of each of its dimensions.
struct Labelled {
  std::string value;
  std::vector<int> labels;
  Shape shape;
};

class EinsumLowering {
 public:
  EinsumLowering(const Node& n, Graph& g, EinsumSpec spec) : n_(n), g_(g), spec_(std::move(spec)), p_(n, g) {}

  std::vector<Node> run() {
    std::vector<Labelled> operands;
    for (std::size_t i = 0; i < spec_.inputs.size(); ++i)
      operands.push_back({n_.inputs.at(i), spec_.inputs[i], g_.shape_of(n_.inputs.at(i))});
    Labelled acc = operands[0];
    for (std::size_t i = 1; i < operands.size(); ++i) {
      std::set<int> needed(spec_.output.begin(), spec_.output.end());  // by the output or a later operand
      for (std::size_t j = i + 1; j < operands.size(); ++j)
        needed.insert(operands[j].labels.begin(), operands[j].labels.end());
      acc = contract(acc, operands[i], needed, i);
    }
    acc = sum_out(acc, std::set<int>(spec_.output.begin(), spec_.output.end()), "sum");
    std::vector<std::int64_t> perm;
    for (int label : spec_.output)
      perm.push_back(std::find(acc.labels.begin(), acc.labels.end(), label) - acc.labels.begin());
    Attributes a;
    const bool moves = !std::is_sorted(perm.begin(), perm.end());
    if (moves) a.values["perm"] = perm;
    p_.add(moves ? Op::Transpose : Op::Identity, moves ? "transpose_out" : "out", {acc.value}, true, std::move(a));
    return p_.take();
  }

 private:
  // x with every dimension whose index is not in `keep` summed away (ReduceSum, keepdims 0).
  Labelled sum_out(const Labelled& x, const std::set<int>& keep, const std::string& role) {
    std::vector<std::int64_t> axes;
    Labelled out{"", {}, {}};
    for (std::size_t d = 0; d < x.labels.size(); ++d) {
      if (keep.count(x.labels[d])) {
        out.labels.push_back(x.labels[d]);
        out.shape.push_back(x.shape[d]);
      } else {
        axes.push_back(static_cast<std::int64_t>(d));
      }
    }
    if (axes.empty()) return x;
    Attributes a;
    a.values["axes"] = axes;
    a.values["keepdims"] = std::int64_t{0};
    out.value = p_.add(Op::ReduceSum, role, {x.value}, false, std::move(a));
    return out;
  }

  // x with its dimensions in the order of `labels` (a Transpose unless they already are), then reshaped to `to`.
  std::string arrange(const Labelled& x, const std::vector<int>& labels, const Shape& to, const std::string& role) {
    std::vector<std::int64_t> perm;
    for (int label : labels) perm.push_back(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin());
    std::string v = x.value;
    Shape moved;
    for (auto d : perm) moved.push_back(x.shape[static_cast<std::size_t>(d)]);
    if (!std::is_sorted(perm.begin(), perm.end())) {
      Attributes a;
      a.values["perm"] = perm;
      v = p_.add(Op::Transpose, role + "_transpose", {v}, false, std::move(a));
    }
    return moved == to ? v : p_.reshape(role + "_reshape", v, to);
  }

  // a (x) b over their common indices that `needed` lacks: [batch, M, K] x [batch, K, N] by MatMul (a Mul of
  // [batch, M, 1] and [batch, 1, N] when K is empty), the result [batch dims, M dims, N dims].
  Labelled contract(const Labelled& a_in, const Labelled& b_in, const std::set<int>& needed, std::size_t step) {
    const std::string tag = "pair" + std::to_string(step);
    auto in = [](const Labelled& x, int label) {
      return std::find(x.labels.begin(), x.labels.end(), label) != x.labels.end();
    };
    std::set<int> keep_a = needed, keep_b = needed;
    keep_a.insert(b_in.labels.begin(), b_in.labels.end());
    keep_b.insert(a_in.labels.begin(), a_in.labels.end());
    const Labelled a = sum_out(a_in, keep_a, tag + "_sum_a"), b = sum_out(b_in, keep_b, tag + "_sum_b");
    std::vector<int> batch, m, k, nn;
    for (int label : a.labels) (in(b, label) ? (needed.count(label) ? batch : k) : m).push_back(label);
    for (int label : b.labels)
      if (!in(a, label)) nn.push_back(label);
    auto extent_in = [](const Labelled& x, int label) {
      return x.shape[static_cast<std::size_t>(std::find(x.labels.begin(), x.labels.end(), label) - x.labels.begin())];
    };
    auto product = [&](const std::vector<int>& labels, const Labelled& x) {
      std::int64_t p = 1;
      for (int label : labels) p *= extent_in(x, label);  // at most the elements of an input: no overflow
      return p;
    };
    // The batch dims stay as they are (MatMul takes them batched and broadcasts an ellipsis dim of 1), so that
    // attention's einsums lower to MatMul -> Softmax -> MatMul with no Reshape between, which fuse_attention
    // matches; equal ones merge into one only where the operands would pass the CUDA backend's 6 dimensions.
    Shape batch_a, batch_b;
    bool same = true;
    for (int label : batch) {
      batch_a.push_back(extent_in(a, label));
      batch_b.push_back(extent_in(b, label));
      same = same && batch_a.back() == batch_b.back();
    }
    const bool merged = same && batch.size() > 4;
    if (merged) batch_a = batch_b = {product(batch, a)};
    Shape to_a = batch_a, to_b = batch_b;
    to_a.insert(to_a.end(), {product(m, a), product(k, a)});
    to_b.insert(to_b.end(), {product(k, b), product(nn, b)});
    std::vector<int> order_a = batch, order_b = batch;
    order_a.insert(order_a.end(), m.begin(), m.end());
    order_a.insert(order_a.end(), k.begin(), k.end());
    order_b.insert(order_b.end(), k.begin(), k.end());
    order_b.insert(order_b.end(), nn.begin(), nn.end());
    const std::string va = arrange(a, order_a, to_a, tag + "_a"), vb = arrange(b, order_b, to_b, tag + "_b");
    const std::string product_value =
        p_.add(k.empty() ? Op::Mul : Op::MatMul, tag + (k.empty() ? "_mul" : "_matmul"), {va, vb});
    Labelled out{"", batch, {}};
    for (int label : batch) out.shape.push_back(std::max(extent_in(a, label), extent_in(b, label)));
    out.labels.insert(out.labels.end(), m.begin(), m.end());
    for (int label : m) out.shape.push_back(extent_in(a, label));
    out.labels.insert(out.labels.end(), nn.begin(), nn.end());
    for (int label : nn) out.shape.push_back(extent_in(b, label));
    Shape flat = merged ? Shape{product(batch, a)}
                        : Shape(out.shape.begin(), out.shape.begin() + static_cast<std::ptrdiff_t>(batch.size()));
    flat.insert(flat.end(), {product(m, a), product(nn, b)});
    out.value = flat == out.shape ? product_value : p_.reshape(tag + "_unflatten", product_value, out.shape);
    return out;
  }

  const Node& n_;
  Graph& g_;
  EinsumSpec spec_;
  Parts p_;
};

// Einsum: the contractions exporters write (outer products, attention's bhqd,bhkd->bhqk, batched products, sums,
// transposes), lowered into ReduceSum, Transpose, Reshape, MatMul and Mul; diagonals are refused.
std::vector<Node> einsum(const Node& n, Graph& g) {
  if (n.inputs.empty()) fail(g, n, "needs at least one input");
  std::vector<Shape> shapes;
  for (const auto& in : n.inputs) {
    if (in.empty()) fail(g, n, "has an absent input");
    shapes.push_back(g.shape_of(in));
  }
  EinsumSpec spec = parse_einsum(g, n, shapes);
  Shape out;
  for (int label : spec.output) out.push_back(spec.size.at(label));
  check_value_shape(g, n, n.outputs.at(0), out);
  return EinsumLowering(n, g, std::move(spec)).run();
}

}  // namespace

std::optional<std::vector<Node>> decompose(const Node& node, Graph& g) {
  if (node.op == Op::DepthToSpace) return depth_to_space(node, g);
  if (node.op == Op::SpaceToDepth) return space_to_depth(node, g);
  if (node.op == Op::Tile) return tile(node, g);
  if (node.op == Op::InstanceNormalization) return instance_normalization(node, g);
  if (node.op == Op::GroupNormalization) return group_normalization(node, g);
  if (node.op == Op::Expand && !g.is_constant(node.inputs.at(0))) return expand(node, g);
  if (node.op == Op::Einsum) return einsum(node, g);
  return std::nullopt;
}

}  // namespace sluice::nn::passes
