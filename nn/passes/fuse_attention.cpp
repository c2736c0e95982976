// Scaled dot-product attention as exporters write it becomes one Attention node (nn/graph.hpp):
//   MatMul(Q', Kt) [-> Mul or Div by a scalar] [-> Add M] -> Softmax(last axis) -> MatMul(., V)
// where Q' is Q or Q times/over a scalar and Kt is K's transpose (a Transpose swapping the last two dims of
// K, possibly composed with a head split, as nn.MultiheadAttention exports it; or a Transpose or run-time value
// that gets one). The scalars multiply into the node's "scale"; M is any additive bias or mask that broadcasts
// to the scores (Swin's relative position bias, DETR's padding mask). Every swallowed value must have no other
// reader and be no graph output; Q, K and V must have the same leading (batch) dims.
// nn.MultiheadAttention's export keeps its tensors sequence-first ([S, B.., d]) and transposes each of Q, K, V to
// [B.., S, d] and the output back: such Transposes are swallowed too (for Q, K, V also a 3-D Transpose followed by
// a Reshape that splits the batch into [N, heads], as torch 2 exports it: the held value is then reshaped to
// [S, N, heads, d], which costs nothing), and the node's "seq_axis" attribute says which operands it reads or
// writes in that layout (sequence axis 0; the backends read them through strides).
// Swin's shifted windows put the window mask between two Reshapes that split the batch of the scores and merge
// it again: scores [B, ..] [-> Add M1] -> Reshape [B1, B2, ..] -> Add M2 -> Reshape [B, ..] -> Softmax, with M1
// (the relative position bias) a constant that does not vary along B and M2 (the mask, one per window of B2)
// a constant. Then the Attention runs on the split batch [B1, B2, ..]: Q, K and V are reshaped to it and Y back
// (views, which cost nothing), and its bias is the one constant M1 + M2, broadcasting to [B1, B2, .., T, S].
#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

class AttentionFuser {
 public:
  explicit AttentionFuser(Graph& g) : g_(g), consumers_(consumer_counts(g)), removed_(g.nodes.size(), false) {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      for (const auto& out : g_.nodes[i].outputs) producer_[out] = i;
  }

  void run() {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (!removed_[i] && g_.nodes[i].op == Op::Softmax) try_fuse(i);
    std::vector<Node> out;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      for (auto& n : before_[i]) out.push_back(std::move(n));
      if (!removed_[i]) out.push_back(std::move(g_.nodes[i]));
      for (auto& n : after_[i]) out.push_back(std::move(n));
    }
    g_.nodes = std::move(out);
  }

 private:
  std::optional<std::size_t> swallowable_producer(const std::string& value, Op op) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || removed_[it->second] || g_.nodes[it->second].op != op) return std::nullopt;
    if (!has_single_use(g_, consumers_, value)) return std::nullopt;
    return it->second;
  }
  std::optional<float> scalar(const std::string& value) const {
    if (!g_.is_constant(value)) return std::nullopt;
    const Tensor& t = g_.constants.at(value);
    if (t.elements() != 1 || t.type != ElementType::f32) return std::nullopt;
    return t.f32[0];
  }
  // If `value` is made by a Mul or Div by a scalar that may be swallowed: its other input and the factor.
  std::optional<std::pair<std::string, float>> scaled(const std::string& value, std::vector<std::size_t>& taken) const {
    for (const Op op : {Op::Mul, Op::Div}) {
      const auto p = swallowable_producer(value, op);
      if (!p) continue;
      const Node& n = g_.nodes[*p];
      for (std::size_t side = 0; side < 2; ++side) {
        const auto s = scalar(n.inputs[side]);
        if (!s || g_.is_constant(n.inputs[1 - side]) || (op == Op::Div && side == 0) || *s == 0.f) continue;
        taken.push_back(*p);
        return std::make_pair(n.inputs[1 - side], op == Op::Mul ? *s : 1.f / *s);
      }
    }
    return std::nullopt;
  }
  // The perm of a Transpose from sequence-first [S, B.., d] to [B.., S, d] (`to_held`: the other way), rank r.
  static std::vector<std::int64_t> sequence_perm(std::size_t r, bool to_held) {
    std::vector<std::int64_t> p(r);
    for (std::size_t i = 0; i + 2 < r; ++i) p[i] = static_cast<std::int64_t>(i + 1);  // B.. from dims 1..
    p[r - 2] = 0;
    p[r - 1] = static_cast<std::int64_t>(r - 1);
    if (!to_held) return p;
    std::vector<std::int64_t> inverse(r);
    for (std::size_t i = 0; i < r; ++i) inverse[static_cast<std::size_t>(p[i])] = static_cast<std::int64_t>(i);
    return inverse;
  }
  static bool is_sequence_transpose(const Node& t, bool to_held) {
    const auto perm = t.attrs.ints("perm");
    return perm.size() >= 3 && perm == sequence_perm(perm.size(), to_held);
  }
  // The held (sequence-first) value behind an operand [B.., S, d], swallowing what made it, if any: a Transpose
  // from [S, B.., d], or a Reshape that splits the batch of a 3-D one ([S, B, d] -> [B, S, d] -> [N, H, S, d];
  // the held value is then reshaped to [S, N, H, d] by a new node in `extra`).
  std::optional<std::string> held_operand(const std::string& operand, std::vector<std::size_t>& taken,
                                          std::vector<Node>& extra) {
    if (const auto t = swallowable_producer(operand, Op::Transpose); t && is_sequence_transpose(g_.nodes[*t], false)) {
      taken.push_back(*t);
      return g_.nodes[*t].inputs[0];
    }
    const auto r = swallowable_producer(operand, Op::Reshape);
    if (!r) return std::nullopt;
    const std::string& mid = g_.nodes[*r].inputs[0];
    const auto t = swallowable_producer(mid, Op::Transpose);
    if (!t || !is_sequence_transpose(g_.nodes[*t], false) || g_.shape_of(mid).size() != 3) return std::nullopt;
    const Shape &split = g_.shape_of(operand), &joint = g_.shape_of(mid);  // [N, H, S, d] and [B, S, d]
    if (split.size() < 3 || split[split.size() - 2] != joint[1] || split.back() != joint[2] ||
        element_count(Shape(split.begin(), split.end() - 2)) != joint[0])
      return std::nullopt;
    const std::string& source = g_.nodes[*t].inputs[0];
    Shape held{joint[1]};
    held.insert(held.end(), split.begin(), split.end() - 2);
    held.push_back(joint[2]);
    const std::string name = unused_value_name(g_, source + "/heads");
    Node reshape{name, Op::Reshape, {source}, {name}, {}};
    reshape.attrs.values["shape"] = held;
    g_.shapes[name] = held;
    extra.push_back(std::move(reshape));
    taken.push_back(*r);
    taken.push_back(*t);
    return name;
  }
  // The one node reading `value` (which is no graph output), if so.
  std::optional<std::size_t> only_reader(const std::string& value) const {
    if (!has_single_use(g_, consumers_, value)) return std::nullopt;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (!removed_[i] && std::count(g_.nodes[i].inputs.begin(), g_.nodes[i].inputs.end(), value)) return i;
    return std::nullopt;
  }
  // Swin's shifted-window bias (see the top of the file) behind the Softmax's input z: the scores inside, the
  // split batch shape, the folded bias M1 + M2 and the nodes swallowed.
  struct SplitBias {
    std::string scores;
    Shape split;
    Tensor bias;
    std::vector<std::size_t> taken;
  };
  std::optional<SplitBias> split_batch_bias(const std::string& z) const {
    const auto merge = swallowable_producer(z, Op::Reshape);
    if (!merge) return std::nullopt;
    const std::string& masked = g_.nodes[*merge].inputs[0];
    const auto add = swallowable_producer(masked, Op::Add);
    if (!add) return std::nullopt;
    const Shape &merged = g_.shape_of(z), &split = g_.shape_of(masked);
    if (merged.size() < 3 || split.size() != merged.size() + 1 || split[0] * split[1] != merged[0] ||
        !std::equal(split.begin() + 2, split.end(), merged.begin() + 1))
      return std::nullopt;
    const Node& a = g_.nodes[*add];
    for (std::size_t side = 0; side < 2; ++side) {
      const auto unmerge = swallowable_producer(a.inputs[side], Op::Reshape);
      const std::string& m2_name = a.inputs[1 - side];
      if (!unmerge || !g_.is_constant(m2_name) || g_.shape_of(a.inputs[side]) != split) continue;
      const Tensor& m2 = g_.constants.at(m2_name);
      if (m2.type != ElementType::f32 || m2.shape.size() > split.size()) continue;
      SplitBias out{g_.nodes[*unmerge].inputs[0], split, m2, {*merge, *add, *unmerge}};
      if (g_.shape_of(out.scores) != merged) continue;
      // M1, added to the scores before the split: constant and the same for every index of B.
      Tensor m1;
      if (const auto inner = swallowable_producer(out.scores, Op::Add)) {
        const Node& b = g_.nodes[*inner];
        for (std::size_t s = 0; s < 2 && m1.shape.empty() && m1.f32.empty(); ++s) {
          const std::string &x = b.inputs[s], &c = b.inputs[1 - s];
          if (!g_.is_constant(c) || g_.is_constant(x) || g_.shape_of(x) != merged) continue;
          const Tensor& t = g_.constants.at(c);
          if (t.type != ElementType::f32 || t.shape.size() > merged.size()) continue;
          if (t.shape.size() == merged.size() && t.shape[0] != 1) continue;  // varies along B
          m1 = t;
          if (m1.shape.size() == merged.size()) m1.shape.erase(m1.shape.begin());  // [1, ..] -> [..]
          out.scores = x;
          out.taken.push_back(*inner);
        }
      }
      // M1 + M2 on the right-aligned union of their shapes (each dim 1 or the split scores').
      const std::size_t rank = std::max(m1.shape.size(), m2.shape.size());
      Shape both(rank, 1);
      for (const Tensor* t : {static_cast<const Tensor*>(&m1), &m2})
        for (std::size_t i = 0; i < t->shape.size(); ++i) {
          const std::size_t at = rank - t->shape.size() + i;
          both[at] = std::max(both[at], t->shape[i]);
        }
      if (m1.f32.empty()) m1.f32 = {0.f};  // no M1
      if (element_count(both) > kMaxFoldedElements) return std::nullopt;
      try {
        out.bias = broadcast_tensor(m2, both);
        const Tensor first = broadcast_tensor(m1, both);
        for (std::size_t i = 0; i < out.bias.f32.size(); ++i) out.bias.f32[i] += first.f32[i];
        Shape& kept = out.bias.shape;  // [1, B2, ..] -> [B2, ..]
        while (kept.size() > 2 && kept[0] == 1) kept.erase(kept.begin());
      } catch (const ModelError&) {
        return std::nullopt;
      }
      return out;
    }
    return std::nullopt;
  }
  static bool same_batch_dims(const Shape& a, const Shape& b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end() - 2, b.begin());
  }

  void try_fuse(std::size_t softmax) {
    const Node& sm = g_.nodes[softmax];
    const std::string& probs = sm.outputs[0];
    const Shape& score_shape = g_.shape_of(probs);
    const auto rank = static_cast<std::int64_t>(score_shape.size());
    if (rank < 2 || sm.attrs.i("axis", -1) != rank - 1) return;
    // Softmax -> MatMul(., V), the Softmax's only reader.
    std::optional<std::size_t> pv;
    for (std::size_t i = softmax + 1; i < g_.nodes.size() && !pv; ++i)
      if (!removed_[i] && g_.nodes[i].op == Op::MatMul && g_.nodes[i].inputs[0] == probs) pv = i;
    if (!pv || !has_single_use(g_, consumers_, probs)) return;
    std::string v = g_.nodes[*pv].inputs[1];
    std::vector<std::size_t> taken{softmax, *pv};
    float scale = 1.f;
    std::string mask;
    std::string z = sm.inputs[0];
    std::optional<SplitBias> split = split_batch_bias(z);
    if (split) {
      z = split->scores;
      taken.insert(taken.end(), split->taken.begin(), split->taken.end());
    } else if (const auto add = swallowable_producer(z, Op::Add)) {  // scores + M
      const Node& a = g_.nodes[*add];
      for (std::size_t side = 0; side < 2 && mask.empty(); ++side) {
        const auto inner = producer_.find(a.inputs[side]);
        if (inner == producer_.end() || removed_[inner->second]) continue;
        const Op op = g_.nodes[inner->second].op;
        if (op != Op::MatMul && op != Op::Mul && op != Op::Div) continue;
        if (g_.shape_of(a.inputs[side]) != g_.shape_of(a.outputs[0])) continue;
        mask = a.inputs[1 - side];
        z = a.inputs[side];
      }
      if (mask.empty()) return;
      taken.push_back(*add);
    }
    if (const auto s = scaled(z, taken)) {
      scale *= s->second;
      z = s->first;
    }
    const auto qk = swallowable_producer(z, Op::MatMul);
    if (!qk) return;
    taken.push_back(*qk);
    std::string q = g_.nodes[*qk].inputs[0], kt = g_.nodes[*qk].inputs[1];
    if (g_.is_constant(q) || g_.is_constant(kt) || g_.is_constant(v)) return;
    if (const auto s = scaled(q, taken)) {
      scale *= s->second;
      q = s->first;
    }
    if (const auto s = scaled(kt, taken)) {
      scale *= s->second;
      kt = s->first;
    }
    const Shape &qs = g_.shape_of(q), &kts = g_.shape_of(kt), &vs = g_.shape_of(v);
    if (qs.size() < 3 || !same_batch_dims(qs, kts) || !same_batch_dims(qs, vs) || qs.size() != score_shape.size())
      return;
    const std::int64_t d = qs.back(), seq = kts.back(), dv = vs.back();
    if (kts[kts.size() - 2] != d || vs[vs.size() - 2] != seq || d > 256 || dv > 256) return;
    // K = Kt with its last two dims swapped: undo the exporter's Transpose when it has no other reader.
    const std::size_t kr = kts.size();
    std::vector<std::int64_t> perm(kr);
    std::iota(perm.begin(), perm.end(), 0);
    std::string k_source = kt;
    if (const auto t = swallowable_producer(kt, Op::Transpose)) {
      perm = g_.nodes[*t].attrs.ints("perm");
      k_source = g_.nodes[*t].inputs[0];
      taken.push_back(*t);
    }
    std::swap(perm[kr - 1], perm[kr - 2]);
    std::string k = k_source;
    std::vector<Node> extra;
    bool identity = true;
    for (std::size_t i = 0; i < kr; ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
    std::vector<bool> sequence_first(4, false);  // Q, K, V, Y held [S, B.., d]: seq_axis 0
    if (perm == sequence_perm(kr, false)) {  // K sequence-first already: read it so
      sequence_first[1] = true;
    } else if (!identity) {
      k = unused_value_name(g_, kt + "/as_keys");
      Node transpose{k, Op::Transpose, {k_source}, {k}, {}};
      transpose.attrs.values["perm"] = perm;
      Shape ks = kts;
      std::swap(ks[kr - 1], ks[kr - 2]);
      g_.shapes[k] = ks;
      extra.push_back(std::move(transpose));
    }
    // Sequence-first operands: Q, K, V made from held ones, Y read only by a Transpose to the held layout.
    std::string* operands[3] = {&q, &k, &v};
    for (std::size_t i = 0; i < 3; ++i) {
      if (sequence_first[i]) continue;
      if (const auto held = held_operand(*operands[i], taken, extra)) {
        *operands[i] = *held;
        sequence_first[i] = true;
      }
    }
    if (split && std::count(sequence_first.begin(), sequence_first.end(), true)) return;
    const Node& last = g_.nodes[*pv];
    std::string y = last.outputs[0];
    if (const auto t = only_reader(y); !split && t && g_.nodes[*t].op == Op::Transpose && is_sequence_transpose(g_.nodes[*t], true)) {
      y = g_.nodes[*t].outputs[0];
      sequence_first[3] = true;
      removed_[*t] = true;  // its readers come after it, so after the Attention too
    }
    std::vector<Node> after;
    if (split) {  // the Attention on the split batch: Q, K, V and Y reshaped (views), the folded bias
      auto view = [&](const std::string& from, const std::string& to, const Shape& shape) {
        Node reshape{to, Op::Reshape, {from}, {to}, {}};
        reshape.attrs.values["shape"] = shape;
        g_.shapes[to] = shape;
        return reshape;
      };
      auto fresh = [&](const std::string& base) { return unused_value_name(g_, base + "/windows"); };
      auto split_shape = [&](const Shape& s) {
        Shape out{split->split[0], split->split[1]};
        out.insert(out.end(), s.begin() + 1, s.end());
        return out;
      };
      for (std::string* operand : operands) {
        const std::string name = fresh(*operand);
        extra.push_back(view(*operand, name, split_shape(g_.shape_of(*operand))));
        *operand = name;
      }
      const std::string windows = fresh(y);
      g_.shapes[windows] = split_shape(g_.shape_of(y));
      after.push_back(view(windows, y, g_.shape_of(y)));
      after.back().name = y + "/merge";
      y = windows;
      mask = add_constant(g_, last.name, "window_bias", std::move(split->bias));
    }
    Node attention{last.name + "/Attention", Op::Attention, {q, k, v, mask}, {y}, {}};
    attention.attrs.values["scale"] = scale;
    if (std::count(sequence_first.begin(), sequence_first.end(), true)) {
      const auto logical_axis = static_cast<std::int64_t>(g_.shape_of(q).size()) - 2;  // every operand's rank
      std::vector<std::int64_t> seq_axis(4);
      for (std::size_t i = 0; i < 4; ++i) seq_axis[i] = sequence_first[i] ? 0 : logical_axis;
      attention.attrs.values["seq_axis"] = seq_axis;
    }
    g_.rewrites.push_back("fused " + std::to_string(taken.size()) + " nodes from " + g_.nodes[*qk].where() + " to " +
                          last.where() + " into " + attention.where() + " (scale " + std::to_string(scale) +
                          (mask.empty() ? "" : ", bias '" + mask + "'") +
                          (split ? ", on the batch split to " + to_string(g_.shape_of(y)) : "") + ")");
    for (std::size_t i : taken) removed_[i] = true;
    // It runs where the final MatMul did (every input exists by then; every reader of its output comes later).
    removed_[*pv] = false;
    before_[*pv] = std::move(extra);
    after_[*pv] = std::move(after);
    g_.nodes[*pv] = std::move(attention);
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::map<std::string, std::size_t> producer_;
  std::vector<bool> removed_;
  std::map<std::size_t, std::vector<Node>> before_;  // nodes that run just before node i (K's new Transpose)
  std::map<std::size_t, std::vector<Node>> after_;   // and just after it (Y's Reshape from a split batch)
};

}  // namespace

void fuse_attention(Graph& g) { AttentionFuser(g).run(); }

}  // namespace sluice::nn::passes
