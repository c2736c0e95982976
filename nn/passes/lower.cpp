// The topological sweep of prepare(): every node is, in order, either removed (Identity, Dropout, float Cast;
// after canonicalization a Pad of nothing or a Slice of everything),
// turned into a constant (Shape; any node whose inputs are all constants), or canonicalized and given
// concrete output shapes. Going in order means a node's inputs always have known shapes and, for
// parameter inputs computed by export artefacts (Shape -> Gather -> Concat -> Reshape), known values.
#include <algorithm>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

bool is_float_type(std::int64_t onnx_type) {
  return onnx_type == 1 || onnx_type == 10 || onnx_type == 11 || onnx_type == 16;  // float, f16, double, bf16
}

bool passes_data_through(const Node& n, const Graph& g) {
  if (n.op == Op::Identity || n.op == Op::Dropout) return true;
  return n.op == Op::Cast && is_float_type(n.attrs.i("to", 0)) && !g.is_constant(n.inputs.at(0));
}

std::string describe_constant(const std::string& name, const Tensor& t) {
  return "'" + name + "' " + to_string(t.shape);
}

class Sweep {
 public:
  explicit Sweep(Graph& g) : g_(g) {
    for (const auto& node : g.nodes)
      for (const auto& in : node.inputs) used_.insert(in);
    for (const auto& out : g.outputs) used_.insert(out.name);
  }

  void run() {
    for (const Node& original : g_.nodes) visit(original);
    g_.nodes = std::move(kept_);
    for (auto& out : g_.outputs) {
      if (g_.is_constant(out.name))
        throw ModelError(g_.source + ": graph output '" + out.name +
                         "' is a constant (it does not depend on any input), which is not supported");
      out.shape = g_.shapes.at(out.name);
      out.type = ElementType::f32;
    }
  }

 private:
  std::string resolve(std::string value) const {
    for (auto it = alias_.find(value); it != alias_.end(); it = alias_.find(value)) value = it->second;
    return value;
  }

  void visit(Node node) {
    for (auto& in : node.inputs)
      if (!in.empty()) in = resolve(in);
    if (node.inputs.empty() || node.inputs[0].empty()) fail(g_, node, "input 0 is missing");
    if (passes_data_through(node, g_)) return remove_pass_through(node);
    if (node.op == Op::Shape) return fold_shape(node);
    if (node.op == Op::Gather && !g_.is_constant(node.inputs[0])) return lower_data_gather(node);
    if (auto parts = decompose(node, g_)) return visit_parts(node, *parts);

    Node canonical = canonicalize(node, g_, used_);
    const bool all_constant = std::all_of(canonical.inputs.begin(), canonical.inputs.end(),
                                          [&](const std::string& in) { return in.empty() || g_.is_constant(in); });
    if (all_constant) return fold(canonical);

    if (canonical.op == Op::GatherElements) use_float_indices(canonical);
    for (const auto& in : canonical.inputs)
      if (!in.empty() && g_.is_constant(in) && g_.constants.at(in).type != ElementType::f32)
        fail(g_, canonical, "integer constant '" + in + "' is used as data; only floating point data runs");
    const std::vector<Shape> shapes = infer_shapes(canonical, g_);
    for (std::size_t i = 0; i < canonical.outputs.size(); ++i) {
      if (canonical.outputs[i].empty()) continue;
      check_value_shape(g_, canonical, canonical.outputs[i], shapes.at(i));
      g_.shapes[canonical.outputs[i]] = shapes.at(i);
    }
    if (canonical.op != node.op)
      g_.rewrites.push_back("rewrote " + node.where() + " as " + op_name(canonical.op) +
                            (canonical.op == Op::Reshape ? " to " + to_string(canonical.attrs.ints("shape")) : ""));
    if (is_identity_copy(canonical) && can_pass_through(canonical)) {
      if (!is_graph_output(g_, canonical.outputs[0])) g_.shapes.erase(canonical.outputs[0]);
      return remove_pass_through(canonical);
    }
    kept_.push_back(canonical);
  }

  // GatherElements' constant integer indices (checked against the axis by canonicalize) become f32 numbers, as
  // run-time indices are: the prepared form holds no integer data outside folding.
  void use_float_indices(Node& gather) {
    const auto it = g_.constants.find(gather.inputs.at(1));
    if (it == g_.constants.end() || it->second.type == ElementType::f32) return;
    const Tensor& t = it->second;
    Tensor numbers;
    numbers.shape = t.shape;
    numbers.f32.assign(t.i64.begin(), t.i64.end());
    gather.inputs[1] = add_constant(g_, gather.name, "indices", std::move(numbers));
  }

  void fold(const Node& canonical) {
    std::vector<Tensor> values = evaluate(canonical, g_);
    for (const Tensor& t : values) folded_elements_ += t.elements();
    if (folded_elements_ > kMaxFoldedTotal)
      fail(g_, canonical, "folding it brings the constants folded at prepare time to " +
                              std::to_string(folded_elements_) + " elements, more than the " +
                              std::to_string(kMaxFoldedTotal) + " allowed");
    std::string made;
    for (std::size_t i = 0; i < canonical.outputs.size(); ++i) {
      if (canonical.outputs[i].empty()) continue;
      made += (made.empty() ? "" : ", ") + describe_constant(canonical.outputs[i], values.at(i));
      g_.constants[canonical.outputs[i]] = std::move(values[i]);
    }
    g_.rewrites.push_back("folded " + canonical.where() + " into constant " + made);
  }

  // Shapes are all known once the batch is bound, so Shape is a constant even of run-time data.
  void fold_shape(const Node& node) {
    const Shape& of = g_.shape_of(node.inputs[0]);
    const auto rank = static_cast<std::int64_t>(of.size());
    auto bound = [&](std::int64_t v) { return std::clamp<std::int64_t>(v < 0 ? v + rank : v, 0, rank); };
    const std::int64_t start = bound(node.attrs.i("start", 0)), end = bound(node.attrs.i("end", rank));
    Tensor t;
    t.type = ElementType::i64;
    if (start < end) t.i64.assign(of.begin() + start, of.begin() + end);
    t.shape = {static_cast<std::int64_t>(t.i64.size())};
    g_.rewrites.push_back("folded " + node.where() + " into constant " + describe_constant(node.outputs.at(0), t));
    g_.constants[node.outputs.at(0)] = std::move(t);
  }

  // Gather of run-time data by constant indices: one index (ViT's x[:, 0]) is a Slice of that position and a
  // Reshape that drops the axis; a contiguous ascending range is a Slice alone. Any other indices are refused.
  void lower_data_gather(const Node& node) {
    const Tensor* indices = constant_input(g_, node, 1);
    if (!indices) fail(g_, node, "indices ('" + node.inputs.at(1) + "') are computed at run time, which is not supported");
    const Shape x = g_.shape_of(node.inputs[0]);
    const std::int64_t axis = normalize_axis(g_, node, node.attrs.i("axis", 0), static_cast<std::int64_t>(x.size()));
    const std::int64_t dim = x[static_cast<std::size_t>(axis)];
    std::vector<std::int64_t> at = as_ints(*indices);
    for (auto& i : at) {
      if (i < -dim || i >= dim) fail(g_, node, "index " + std::to_string(i) + " is out of range for " + std::to_string(dim));
      if (i < 0) i += dim;
    }
    bool contiguous = !at.empty() && indices->shape.size() <= 1;
    for (std::size_t k = 1; contiguous && k < at.size(); ++k) contiguous = at[k] == at[0] + static_cast<std::int64_t>(k);
    if (!contiguous)
      fail(g_, node, "gathering run-time data is supported for one index or a contiguous ascending range, not [" +
                         join_ints(at) + "]");
    const std::string& out = node.outputs.at(0);
    auto constant = [&](const std::string& role, std::vector<std::int64_t> values) {
      Tensor t;
      t.type = ElementType::i64;
      t.shape = {static_cast<std::int64_t>(values.size())};
      t.i64 = std::move(values);
      const std::string name = out + "/gather_" + role;
      if (g_.constants.count(name) || g_.shapes.count(name)) fail(g_, node, "value '" + name + "' exists already");
      g_.constants[name] = std::move(t);
      return name;
    };
    const bool drops_axis = indices->shape.empty();
    Node slice;
    slice.name = node.name + "/slice";
    slice.op = Op::Slice;
    slice.inputs = {node.inputs[0], constant("starts", {at.front()}), constant("ends", {at.back() + 1}),
                    constant("axes", {axis})};
    slice.outputs = {drops_axis ? out + "/gather_slice" : out};
    g_.rewrites.push_back("rewrote " + node.where() + " of run-time data as Slice" + (drops_axis ? " and Reshape" : ""));
    visit(slice);
    if (!drops_axis) return;
    Shape kept = x;
    kept.erase(kept.begin() + axis);
    Node reshape;
    reshape.name = node.name + "/reshape";
    reshape.op = Op::Reshape;
    reshape.inputs = {slice.outputs[0], constant("shape", kept)};
    reshape.outputs = {out};
    visit(reshape);
  }

  void visit_parts(const Node& node, const std::vector<Node>& parts) {
    std::string ops;
    for (const Node& part : parts) ops += (ops.empty() ? "" : ", ") + op_name(part.op);
    g_.rewrites.push_back("rewrote " + node.where() + " as " + ops);
    for (const Node& part : parts) visit(part);
  }

  // A canonical Pad of nothing (all pads zero, any mode) or a Slice of every element in order (starts 0, steps 1,
  // each end the whole dim) copies its input unchanged: Swin's window padding and un-padding once the sizes
  // divide. Decided on the bound shapes, it stays a copy in runs of fewer items: a partial run shrinks dim 0 of
  // input and output alike, and x[0:B] of fewer than B items is all of them.
  bool is_identity_copy(const Node& n) const {
    if (n.op == Op::Pad) {
      const auto pads = n.attrs.ints("pads");
      return std::all_of(pads.begin(), pads.end(), [](std::int64_t p) { return p == 0; });
    }
    if (n.op != Op::Slice) return false;
    const Shape& in = g_.shape_of(n.inputs[0]);
    const auto starts = n.attrs.ints("starts"), ends = n.attrs.ints("ends"), steps = n.attrs.ints("steps");
    if (starts.size() != in.size() || ends.size() != in.size() || steps.size() != in.size()) return false;
    for (std::size_t d = 0; d < in.size(); ++d)
      if (starts[d] != 0 || steps[d] != 1 || ends[d] < in[d]) return false;
    return true;
  }
  // Whether remove_pass_through can remove it: when its output is a graph output, the input's producer takes
  // that name, which needs a producer (not a graph input or constant) whose output is no graph output itself.
  // Otherwise the copy stays.
  bool can_pass_through(const Node& node) const {
    const std::string& in = node.inputs[0];
    if (!is_graph_output(g_, node.outputs.at(0))) return true;
    if (is_graph_output(g_, in)) return false;
    return std::any_of(kept_.begin(), kept_.end(), [&](const Node& k) {
      return std::find(k.outputs.begin(), k.outputs.end(), in) != k.outputs.end();
    });
  }

  // Identity, Dropout and float-to-float Cast: later readers read the input instead. A graph output keeps
  // its name, so when one passes through here its producer is renamed instead.
  void remove_pass_through(const Node& node) {
    for (std::size_t i = 1; i < node.outputs.size(); ++i)
      if (!node.outputs[i].empty() && used_.count(node.outputs[i]))
        fail(g_, node, "output '" + node.outputs[i] + "' (the dropout mask) is used, which is not supported");
    if (node.op == Op::Dropout)
      if (const Tensor* training = constant_input(g_, node, 2); training && as_ints(*training).at(0) != 0) {
        // Training mode drops with probability `ratio` (default 0.5); with a constant ratio of 0 (torchvision's
        // Swin passes training=True with p=0) it keeps every element: still a copy.
        const Tensor* ratio = constant_input(g_, node, 1);
        if (!ratio || as_floats(*ratio).at(0) != 0.f)
          fail(g_, node, "training_mode=true is not supported (export the model in eval mode)");
      }
    const std::string& in = node.inputs[0];
    const std::string& out = node.outputs.at(0);
    g_.rewrites.push_back("removed " + node.where());
    if (!is_graph_output(g_, out)) {
      alias_[out] = in;
      return;
    }
    auto producer = std::find_if(kept_.begin(), kept_.end(), [&](const Node& k) {
      return std::find(k.outputs.begin(), k.outputs.end(), in) != k.outputs.end();
    });
    if (producer == kept_.end() || is_graph_output(g_, in))
      fail(g_, node, "graph output '" + out + "' would be a copy of '" + in + "', which is not supported");
    for (auto& k : kept_) {
      std::replace(k.inputs.begin(), k.inputs.end(), in, out);
      std::replace(k.outputs.begin(), k.outputs.end(), in, out);
    }
    g_.shapes[out] = g_.shapes.at(in);
    g_.shapes.erase(in);
    alias_[in] = out;
  }

  Graph& g_;
  std::set<std::string> used_;                 // values some node or graph output reads
  std::map<std::string, std::string> alias_;   // removed value -> the value to read instead
  std::vector<Node> kept_;
  std::int64_t folded_elements_ = 0;            // all constants folded so far (kMaxFoldedTotal)
};

}  // namespace

void lower(Graph& g) { Sweep(g).run(); }

}  // namespace sluice::nn::passes
