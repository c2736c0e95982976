// Self-attention's q|k|v split read in place: nn.MultiheadAttention computes Q, K and V as one product P
// [S, N, 3E] and splits it with re-indexing nodes (torch 2: Reshape, Unsqueeze, Transpose, Squeeze, Gather;
// torch 1.13: Slice on the last dim) before the head Reshapes. Each copy is pure re-indexing, so when Q, K and V
// of an Attention node are each "index p of one axis of the same value X" (seen through Reshapes, Transposes
// that keep the other dims in order, and a Slice picking one part), the Attention reads them from X itself:
// X reshaped (a view) to the held operand's shape with the parts axis inserted, attrs "packed_axis" and
// "packed_part" (nn/graph.hpp). Every swallowed value must be read only by the swallowed nodes (or the
// Attention) and be no graph output; otherwise the graph is left as it is.
#include <algorithm>
#include <set>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

std::int64_t product(const Shape& s, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// An operand as index `part` of axis `axis` of `value` seen as `view` (value's elements in row-major order).
struct Part {
  std::string value;
  Shape view;
  std::size_t axis = 0;
  std::int64_t part = 0;
  std::vector<std::size_t> taken;  // the nodes between value and the operand
};

class PartsFuser {
 public:
  explicit PartsFuser(Graph& g) : g_(g), consumers_(consumer_counts(g)) {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& out : g_.nodes[i].outputs) producer_[out] = i;
  }

  void run() {
    std::set<std::size_t> removed;
    std::vector<std::pair<std::size_t, Node>> views;  // (attention index, the Reshape view to run before it)
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (g_.nodes[i].op == Op::Attention) try_fuse(i, removed, views);
    if (views.empty()) return;
    std::vector<Node> out;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      for (auto& [at, view] : views)
        if (at == i) out.push_back(std::move(view));
      if (!removed.count(i)) out.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(out);
  }

 private:
  std::optional<std::size_t> producer(const std::string& value, Op op) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || g_.nodes[it->second].op != op || is_graph_output(g_, value)) return std::nullopt;
    return it->second;
  }

  // Walks back from an operand: Reshapes, then the Slice that picks one part, then Reshapes and Transposes.
  std::optional<Part> part_behind(std::string value) const {
    Part p;
    while (const auto r = producer(value, Op::Reshape)) {
      p.taken.push_back(*r);
      value = g_.nodes[*r].inputs[0];
    }
    const auto s = producer(value, Op::Slice);
    if (!s) return std::nullopt;
    const Node& slice = g_.nodes[*s];
    const Shape& in = g_.shape_of(slice.inputs[0]);
    const auto starts = slice.attrs.ints("starts"), ends = slice.attrs.ints("ends"), steps = slice.attrs.ints("steps");
    std::optional<std::size_t> axis;
    for (std::size_t d = 0; d < in.size(); ++d) {
      if (steps[d] != 1) return std::nullopt;
      if (starts[d] == 0 && ends[d] == in[d]) continue;
      if (axis) return std::nullopt;
      axis = d;
    }
    if (!axis) return std::nullopt;
    const std::int64_t width = ends[*axis] - starts[*axis];
    if (width <= 0 || in[*axis] % width != 0 || starts[*axis] % width != 0) return std::nullopt;
    p.taken.push_back(*s);
    p.value = slice.inputs[0];
    p.view = in;  // the sliced axis seen as [parts, width]
    p.view[*axis] = in[*axis] / width;
    p.view.insert(p.view.begin() + static_cast<std::ptrdiff_t>(*axis) + 1, width);
    p.axis = *axis;
    p.part = starts[*axis] / width;
    for (;;) {
      if (const auto r = producer(p.value, Op::Reshape)) {  // the same elements in the same order
        p.taken.push_back(*r);
        p.value = g_.nodes[*r].inputs[0];
      } else if (const auto t = producer(p.value, Op::Transpose); t && through_transpose(g_.nodes[*t], p)) {
        p.taken.push_back(*t);
      } else {
        return p;
      }
    }
  }

  // p seen through the Transpose that made its value, if the parts axis is one of the Transpose's dims and the
  // other dims keep their order (size-1 dims aside), so that each part's elements keep their order.
  bool through_transpose(const Node& t, Part& p) const {
    const Shape& out = g_.shape_of(t.outputs[0]);
    const Shape& in = g_.shape_of(t.inputs[0]);
    const auto perm = t.attrs.ints("perm");
    const std::int64_t before = product(p.view, 0, p.axis);
    std::optional<std::size_t> axis;
    for (std::size_t d = 0; d < out.size() && !axis; ++d)
      if (product(out, 0, d) == before && out[d] == p.view[p.axis]) axis = d;
    if (!axis) return false;
    std::int64_t last = -1;
    for (std::size_t d = 0; d < out.size(); ++d) {
      if (d == *axis || out[d] == 1) continue;
      if (perm[d] < last) return false;
      last = perm[d];
    }
    p.value = t.inputs[0];
    p.view = in;
    p.axis = static_cast<std::size_t>(perm[*axis]);
    return true;
  }

  void try_fuse(std::size_t at, std::set<std::size_t>& removed, std::vector<std::pair<std::size_t, Node>>& views) {
    Node& attention = g_.nodes[at];
    const Shape held = g_.shape_of(attention.inputs[0]);
    std::vector<Part> parts;
    const auto seq_axis = attention.attrs.ints("seq_axis", {});
    if (!seq_axis.empty() && (seq_axis[1] != seq_axis[0] || seq_axis[2] != seq_axis[0])) return;
    for (std::size_t i = 0; i < 3; ++i) {
      if (g_.shape_of(attention.inputs[i]) != held) return;  // one packed value holds operands of one layout
      auto p = part_behind(attention.inputs[i]);
      if (!p || (!parts.empty() && (p->value != parts[0].value || p->view != parts[0].view || p->axis != parts[0].axis)))
        return;
      parts.push_back(std::move(*p));
    }
    // Every value swallowed is read only by the swallowed nodes and the Attention.
    std::set<std::size_t> taken;
    for (const Part& p : parts) taken.insert(p.taken.begin(), p.taken.end());
    if (std::any_of(taken.begin(), taken.end(), [&](std::size_t n) { return removed.count(n) != 0; })) return;
    std::map<std::string, int> reads;
    for (std::size_t n : taken)
      for (const auto& in : g_.nodes[n].inputs) ++reads[in];
    for (std::size_t i = 0; i < 3; ++i) ++reads[attention.inputs[i]];
    for (std::size_t n : taken)
      if (reads[g_.nodes[n].outputs[0]] != consumers_.at(g_.nodes[n].outputs[0])) return;
    // The held shape with the parts axis inserted where the elements before and after it split.
    const Part& p = parts[0];
    const std::int64_t before = product(p.view, 0, p.axis);
    std::optional<std::size_t> split;
    for (std::size_t k = 0; k <= held.size() && !split; ++k)
      if (product(held, 0, k) == before && product(held, k, held.size()) == product(p.view, p.axis + 1, p.view.size()))
        split = k;
    if (!split || *split + 2 > held.size()) return;  // the parts axis must stay before the rows and depth
    Shape packed = held;
    packed.insert(packed.begin() + static_cast<std::ptrdiff_t>(*split), p.view[p.axis]);
    const std::string name = unused_value_name(g_, p.value + "/parts");
    Node view{name, Op::Reshape, {p.value}, {name}, {}};
    view.attrs.values["shape"] = packed;
    g_.shapes[name] = packed;
    g_.rewrites.push_back("fused " + std::to_string(taken.size()) + " nodes splitting '" + p.value + "' into Q, K, V into " +
                          attention.where() + " (reads them in place)");
    for (std::size_t i = 0; i < 3; ++i) attention.inputs[i] = name;
    attention.attrs.values["packed_axis"] = static_cast<std::int64_t>(*split);
    attention.attrs.values["packed_part"] = std::vector<std::int64_t>{parts[0].part, parts[1].part, parts[2].part};
    removed.insert(taken.begin(), taken.end());
    views.emplace_back(at, std::move(view));
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::map<std::string, std::size_t> producer_;
};

}  // namespace

void fuse_attention_parts(Graph& g) { PartsFuser(g).run(); }

}  // namespace sluice::nn::passes
