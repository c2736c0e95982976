// Transposes around an Attention node become operand layouts (its "seq_axis" and "packed_axis", nn/graph.hpp),
// so that no copy moves the sequence axis before or after it. Rewrites, repeated until none applies:
//   * input: a Transpose whose output only an Attention reads (an operand, or the packed q|k|v through the
//     Reshape that splits the last dim into parts) and that only moves the sequence axis and the parts axis
//     among the leading dims: the Attention reads the Transpose's input (Swin's perm (2, 0, 3, 1, 4));
//   * output: a Transpose, Y's only reader, that only moves Y's sequence axis: the Attention writes its output
//     (Swin's [N, heads, S, d] -> [N, S, heads, d]);
//   * below a Linear: a Transpose of the leading dims whose output only a row-wise Linear reads commutes with it
//     (the Linear acts on the last dim), so it moves below the Linear when the input rewrite then takes it
//     (nn.MultiheadAttention's batch_first export: [B, S, E] -> [S, B, E] -> in_proj);
//   * out of the output projection: Y held [S, B, ..] -> Reshape [S*B, E] -> Linear -> Reshape [S, B, N] ->
//     Transpose [B, S, N] becomes Y held [B, S, ..] -> Reshape [B, S, E] -> Linear -> [B, S, N] (the batch
//     stays in dim 0: the Linear can take the residual Add after it, and no Reshape merges the batch, which
//     would refuse partial batches).
// Every value rewritten must have one reader (the node the rewrite takes) and be no graph output; a Linear with
// a residual input is left as it is. Otherwise the graph is left as it is.
#include <algorithm>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

using Perm = std::vector<std::int64_t>;

// The Attention's seq_axis, written out (rank - 2 where the attribute is absent) from the held ranks.
std::vector<std::int64_t> seq_axes(const Graph& g, const Node& attention) {
  const auto given = attention.attrs.ints("seq_axis", {});
  if (!given.empty()) return given;
  const bool packed = attention.attrs.i("packed_axis", -1) >= 0;
  std::vector<std::int64_t> axes(4);
  for (std::size_t i = 0; i < 4; ++i) {
    const std::string& value = i < 3 ? attention.inputs[i] : attention.outputs[0];
    axes[i] = static_cast<std::int64_t>(g.shape_of(value).size()) - (i < 3 && packed ? 3 : 2);
  }
  return axes;
}

// True when `perm` keeps every axis but `moved` (and `also_moved`, if >= 0) in order.
bool keeps_others_in_order(const Perm& perm, std::int64_t moved, std::int64_t also_moved = -1) {
  std::int64_t last = -1;
  for (std::size_t d = 0; d < perm.size(); ++d) {
    if (static_cast<std::int64_t>(d) == moved || static_cast<std::int64_t>(d) == also_moved) continue;
    if (perm[d] < last) return false;
    last = perm[d];
  }
  return true;
}

// The axis of a held operand without the parts axis `packed` (-1: none) -> with it, and back.
std::int64_t with_parts(std::int64_t axis, std::int64_t packed) { return packed >= 0 && axis >= packed ? axis + 1 : axis; }
std::int64_t without_parts(std::int64_t axis, std::int64_t packed) { return packed >= 0 && axis > packed ? axis - 1 : axis; }

class LayoutRewriter {
 public:
  explicit LayoutRewriter(Graph& g) : g_(g) {}

  void run() {
    for (bool changed = true; changed;) {
      index();
      changed = false;
      for (std::size_t i = 0; i < g_.nodes.size() && !changed; ++i) {
        const Node& n = g_.nodes[i];
        if (n.op == Op::Transpose) changed = absorb_input(i) || sink_below_linear(i);
        else if (n.op == Op::Attention) changed = absorb_output(i) || hoist_out_of_projection(i);
      }
    }
  }

 private:
  void index() {
    readers_.clear();
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& in : g_.nodes[i].inputs)
        if (!in.empty()) readers_[in].push_back(i);
  }
  // The one node reading `value` (perhaps several times), when it is no graph output.
  std::optional<std::size_t> only_reader(const std::string& value) const {
    const auto it = readers_.find(value);
    if (it == readers_.end() || is_graph_output(g_, value)) return std::nullopt;
    if (std::any_of(it->second.begin(), it->second.end(), [&](std::size_t r) { return r != it->second[0]; }))
      return std::nullopt;
    return it->second[0];
  }
  std::optional<std::size_t> only_reader(const std::string& value, Op op) const {
    const auto r = only_reader(value);
    if (!r || g_.nodes[*r].op != op) return std::nullopt;
    return r;
  }
  // A Transpose of the leading dims (the last one stays).
  static std::optional<Perm> leading_perm(const Node& t) {
    Perm perm = t.attrs.ints("perm");
    if (perm.size() < 3 || perm.back() != static_cast<std::int64_t>(perm.size()) - 1) return std::nullopt;
    return perm;
  }
  // A Linear that acts row by row on `value` (its input X, no residual R).
  bool row_wise_linear(const Node& n, const std::string& value) const {
    return n.op == Op::Linear && n.inputs[0] == value && (n.inputs.size() < 4 || n.inputs[3].empty()) &&
           std::count(n.inputs.begin(), n.inputs.end(), value) == 1;
  }

  // The Attention's new attributes and inputs if it read, instead of `value` (made by a Transpose of `perm`
  // from a value of shape `source`), that Transpose's input; nullopt when its layout attributes cannot say so.
  struct InputPlan {
    std::size_t attention;
    std::optional<std::size_t> parts_view;  // the Reshape that splits the packed q|k|v, given a new shape
    Shape view_shape;
    std::vector<std::int64_t> seq_axis;
    std::int64_t packed_axis = -1;
  };
  std::optional<InputPlan> plan_input(const std::string& value, const Perm& perm, const Shape& source) const {
    const auto reader = only_reader(value);
    if (!reader) return std::nullopt;
    InputPlan plan;
    Perm p = perm;  // over the value the Attention reads
    std::optional<std::size_t> attention;
    if (g_.nodes[*reader].op == Op::Attention) {
      attention = reader;
    } else if (g_.nodes[*reader].op == Op::Reshape) {  // the packed q|k|v view, splitting the last dim at most
      const std::string& view = g_.nodes[*reader].outputs[0];
      const Shape &in = g_.shape_of(value), &out = g_.shape_of(view);
      if (out.size() < in.size() || !std::equal(in.begin(), in.end() - 1, out.begin())) return std::nullopt;
      attention = only_reader(view, Op::Attention);
      if (!attention || g_.nodes[*attention].attrs.i("packed_axis", -1) < 0) return std::nullopt;
      for (auto d = static_cast<std::int64_t>(in.size()); d < static_cast<std::int64_t>(out.size()); ++d) p.push_back(d);
      plan.parts_view = reader;
      plan.view_shape = Shape(source.begin(), source.end() - 1);
      plan.view_shape.insert(plan.view_shape.end(), out.begin() + static_cast<std::ptrdiff_t>(in.size()) - 1, out.end());
    } else {
      return std::nullopt;
    }
    const Node& a = g_.nodes[*attention];
    const std::string& read = plan.parts_view ? g_.nodes[*plan.parts_view].outputs[0] : value;
    const std::int64_t packed = a.attrs.i("packed_axis", -1);
    if (packed >= 0 && (a.inputs[0] != read || a.inputs[1] != read || a.inputs[2] != read)) return std::nullopt;
    if (packed < 0 && (std::count(a.inputs.begin(), a.inputs.end(), value) != 1 ||
                       std::find(a.inputs.begin(), a.inputs.begin() + 3, value) == a.inputs.begin() + 3))
      return std::nullopt;  // one of Q, K, V (not the bias)
    plan.attention = *attention;
    plan.seq_axis = seq_axes(g_, a);
    plan.packed_axis = packed >= 0 ? p[static_cast<std::size_t>(packed)] : -1;
    if (plan.packed_axis + 2 >= static_cast<std::int64_t>(p.size())) return std::nullopt;  // parts before the rows
    for (std::size_t i = 0; i < 3; ++i) {
      if (a.inputs[i] != read) continue;
      const std::int64_t seq = with_parts(plan.seq_axis[i], packed);  // in the value read
      if (!keeps_others_in_order(p, seq, packed)) return std::nullopt;
      plan.seq_axis[i] = without_parts(p[static_cast<std::size_t>(seq)], plan.packed_axis);
    }
    return plan;
  }

  bool absorb_input(std::size_t at) {
    const Node& t = g_.nodes[at];
    const auto perm = leading_perm(t);
    if (!perm) return false;
    const auto plan = plan_input(t.outputs[0], *perm, g_.shape_of(t.inputs[0]));
    if (!plan) return false;
    const std::string source = t.inputs[0], value = t.outputs[0];
    Node& a = g_.nodes[plan->attention];
    if (plan->parts_view) {
      Node& view = g_.nodes[*plan->parts_view];
      view.inputs[0] = source;
      view.attrs.values["shape"] = plan->view_shape;
      g_.shapes[view.outputs[0]] = plan->view_shape;
    } else {
      std::replace(a.inputs.begin(), a.inputs.end(), value, source);
    }
    if (plan->packed_axis >= 0) a.attrs.values["packed_axis"] = plan->packed_axis;
    a.attrs.values["seq_axis"] = plan->seq_axis;
    g_.rewrites.push_back("absorbed " + t.where() + " into " + a.where() + " (reads '" + source + "' in place)");
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(at));
    return true;
  }

  // Transpose -> Linear becomes Linear -> Transpose when the input rewrite then takes the Transpose.
  bool sink_below_linear(std::size_t at) {
    const Node& t = g_.nodes[at];
    const auto perm = leading_perm(t);
    const auto l = perm ? only_reader(t.outputs[0], Op::Linear) : std::nullopt;
    if (!l || !row_wise_linear(g_.nodes[*l], t.outputs[0])) return false;
    const std::string& product = g_.nodes[*l].outputs[0];
    Shape unmoved = g_.shape_of(t.inputs[0]);  // the product before the Transpose
    unmoved.back() = g_.shape_of(product).back();
    if (!plan_input(product, *perm, unmoved)) return false;
    const std::string name = unused_value_name(g_, product + "/unmoved");
    g_.shapes[name] = unmoved;
    Node linear = g_.nodes[*l];
    Node transpose = t;
    linear.inputs[0] = t.inputs[0];
    linear.outputs[0] = name;
    transpose.inputs[0] = name;
    transpose.outputs[0] = product;
    g_.shapes.erase(t.outputs[0]);
    g_.rewrites.push_back("moved " + t.where() + " below " + linear.where() + " (the Linear acts on rows)");
    g_.nodes[at] = std::move(linear);
    g_.nodes[*l] = std::move(transpose);
    return true;
  }

  // Attention -> Transpose that only moves Y's sequence axis: the Attention writes the Transpose's output.
  bool absorb_output(std::size_t at) {
    const std::string y = g_.nodes[at].outputs[0];
    const auto t = only_reader(y, Op::Transpose);
    if (!t) return false;
    const auto perm = leading_perm(g_.nodes[*t]);
    if (!perm) return false;
    auto axes = seq_axes(g_, g_.nodes[at]);
    const auto seq = static_cast<std::int64_t>(std::find(perm->begin(), perm->end(), axes[3]) - perm->begin());
    if (!keeps_others_in_order(*perm, seq)) return false;
    axes[3] = seq;
    Node& a = g_.nodes[at];
    a.attrs.values["seq_axis"] = axes;
    a.outputs[0] = g_.nodes[*t].outputs[0];
    g_.shapes.erase(y);
    g_.rewrites.push_back("absorbed " + g_.nodes[*t].where() + " into " + a.where() + " (writes its output in place)");
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(*t));
    return true;
  }

  // Y held [S, B, ..] -> Reshape [S*B, E] or [S, B, E] -> Linear -> Reshape [S, B, N] -> Transpose (1, 0, 2):
  // Y is written [B, S, ..] and the rest stays batch-first ([B, S, E], [B, S, N]).
  bool hoist_out_of_projection(std::size_t at) {
    const Node& a = g_.nodes[at];
    const std::string& y = a.outputs[0];
    auto axes = seq_axes(g_, a);
    const Shape& held = g_.shape_of(y);
    if (axes[3] != 0 || held.size() < 3) return false;
    const std::int64_t seq = held[0], batch = held[1], width = element_count(Shape(held.begin() + 2, held.end()));
    const auto merge = only_reader(y, Op::Reshape);
    if (!merge) return false;
    const std::string& rows = g_.nodes[*merge].outputs[0];
    if (g_.shape_of(rows) != Shape{seq * batch, width} && g_.shape_of(rows) != Shape{seq, batch, width}) return false;
    const auto l = only_reader(rows, Op::Linear);
    if (!l || !row_wise_linear(g_.nodes[*l], rows)) return false;
    const std::string& product = g_.nodes[*l].outputs[0];
    const std::int64_t n = g_.shape_of(product).back();
    const auto split = only_reader(product, Op::Reshape);
    if (!split || g_.shape_of(g_.nodes[*split].outputs[0]) != Shape{seq, batch, n}) return false;
    const auto t = only_reader(g_.nodes[*split].outputs[0], Op::Transpose);
    if (!t || g_.nodes[*t].attrs.ints("perm") != Perm{1, 0, 2}) return false;
    // Y [B, S, ..]: the sequence axis at 1, the batch and the rest in their order.
    Shape batch_first = held;
    std::swap(batch_first[0], batch_first[1]);
    axes[3] = 1;
    const std::string out = g_.nodes[*t].outputs[0];
    g_.shapes[y] = batch_first;
    g_.nodes[at].attrs.values["seq_axis"] = axes;
    g_.shapes[rows] = Shape{batch, seq, width};
    g_.nodes[*merge].attrs.values["shape"] = Shape{batch, seq, width};
    g_.shapes.erase(product);
    g_.shapes.erase(g_.nodes[*split].outputs[0]);
    g_.nodes[*l].outputs[0] = out;  // [B, S, N], what the Transpose gave
    g_.rewrites.push_back("moved " + g_.nodes[*t].where() + " above " + g_.nodes[*l].where() + " into " +
                          g_.nodes[at].where() + " (writes its output batch-first)");
    const std::size_t first = std::min(*split, *t), second = std::max(*split, *t);
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(second));
    g_.nodes.erase(g_.nodes.begin() + static_cast<std::ptrdiff_t>(first));
    return true;
  }

  Graph& g_;
  std::map<std::string, std::vector<std::size_t>> readers_;
};

}  // namespace

void absorb_attention_transposes(Graph& g) { LayoutRewriter(g).run(); }

}  // namespace sluice::nn::passes
