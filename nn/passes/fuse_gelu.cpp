// GELU as exporters write it — x * 0.5 * (1 + erf(x / sqrt(2))) in five nodes (Div or Mul by 1/sqrt(2), Erf, Add 1,
// two Muls in any of their orders) — becomes one Gelu node (approximate "none"): one pass over the data instead
// of five on every backend. The intermediate values must have no other reader and be no graph output.
#include <cmath>
#include <optional>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

class GeluFuser {
 public:
  explicit GeluFuser(Graph& g) : g_(g), consumers_(consumer_counts(g)), removed_(g.nodes.size(), false) {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      for (const auto& out : g_.nodes[i].outputs) producer_[out] = i;
      for (const auto& in : g_.nodes[i].inputs) readers_[in].push_back(i);
    }
  }

  void run() {
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (!removed_[i] && g_.nodes[i].op == Op::Erf) try_fuse(i);
    std::vector<Node> kept;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i)
      if (!removed_[i]) kept.push_back(std::move(g_.nodes[i]));
    g_.nodes = std::move(kept);
  }

 private:
  // The scalar constant behind `value`, if it is one.
  std::optional<float> scalar(const std::string& value) const {
    if (!g_.is_constant(value)) return std::nullopt;
    const Tensor& t = g_.constants.at(value);
    if (t.elements() != 1 || t.type != ElementType::f32) return std::nullopt;
    return t.f32[0];
  }
  static bool near(float v, double want) { return std::fabs(v - want) <= 1e-6 * std::fabs(want); }

  // The node (index) that alone reads `value`, when `value` may be swallowed.
  std::optional<std::size_t> sole_reader(const std::string& value) const {
    if (!has_single_use(g_, consumers_, value)) return std::nullopt;
    auto it = readers_.find(value);
    if (it == readers_.end() || it->second.size() != 1 || removed_[it->second[0]]) return std::nullopt;
    return it->second[0];
  }
  std::optional<std::size_t> producer(const std::string& value) const {
    auto it = producer_.find(value);
    if (it == producer_.end() || removed_[it->second]) return std::nullopt;
    return it->second;
  }
  // For a binary node with one scalar-constant input: the other input and the scalar.
  std::optional<std::pair<std::string, float>> with_scalar(const Node& n) const {
    if (n.inputs.size() != 2) return std::nullopt;
    for (std::size_t side = 0; side < 2; ++side)
      if (const auto s = scalar(n.inputs[side]); s && !g_.is_constant(n.inputs[1 - side]))
        return std::make_pair(n.inputs[1 - side], *s);
    return std::nullopt;
  }
  // The input of binary node `n` other than `value`, or nothing if `value` is not one of its inputs.
  static std::optional<std::string> other_input(const Node& n, const std::string& value) {
    if (n.inputs.size() != 2) return std::nullopt;
    if (n.inputs[0] == value) return n.inputs[1];
    if (n.inputs[1] == value) return n.inputs[0];
    return std::nullopt;
  }

  void try_fuse(std::size_t erf) {
    const Node& e = g_.nodes[erf];
    // x / sqrt(2) or x * (1 / sqrt(2)), read only by the Erf.
    const auto scaled = producer(e.inputs[0]);
    if (!scaled || !sole_reader(e.inputs[0])) return;
    const Node& s = g_.nodes[*scaled];
    const auto xs = with_scalar(s);
    if (!xs || !((s.op == Op::Div && near(xs->second, std::sqrt(2.0))) || (s.op == Op::Mul && near(xs->second, std::sqrt(0.5)))))
      return;
    const std::string x = xs->first;
    // 1 + erf(.)
    const auto plus = sole_reader(e.outputs[0]);
    if (!plus || g_.nodes[*plus].op != Op::Add) return;
    const auto one = with_scalar(g_.nodes[*plus]);
    if (!one || one->first != e.outputs[0] || !near(one->second, 1.0)) return;
    const std::string& a = g_.nodes[*plus].outputs[0];
    // The two multiplications by x and by 0.5, in any order.
    const auto m1 = sole_reader(a);
    if (!m1 || g_.nodes[*m1].op != Op::Mul) return;
    const auto t = other_input(g_.nodes[*m1], a);
    if (!t) return;
    std::vector<std::size_t> swallowed{*scaled, erf, *plus, *m1};
    std::size_t last = *m1;
    if (*t == x || scalar(*t)) {  // (x * a) * 0.5, or x * (a * 0.5)
      const bool half_first = scalar(*t).has_value();
      if (half_first && !near(*scalar(*t), 0.5)) return;
      const auto m2 = sole_reader(g_.nodes[*m1].outputs[0]);
      if (!m2 || g_.nodes[*m2].op != Op::Mul) return;
      const auto u = other_input(g_.nodes[*m2], g_.nodes[*m1].outputs[0]);
      if (!u || (half_first ? *u != x : !(scalar(*u) && near(*scalar(*u), 0.5)))) return;
      swallowed.push_back(*m2);
      last = *m2;
    } else {  // (x * 0.5) * a
      const auto h = producer(*t);
      if (!h || !sole_reader(*t) || g_.nodes[*h].op != Op::Mul) return;
      const auto half = with_scalar(g_.nodes[*h]);
      if (!half || half->first != x || !near(half->second, 0.5)) return;
      swallowed.push_back(*h);
    }
    Node gelu{e.name + "/Gelu", Op::Gelu, {x}, {g_.nodes[last].outputs[0]}, {}};
    g_.rewrites.push_back("fused " + std::to_string(swallowed.size()) + " nodes from " + s.where() +
                          " to " + g_.nodes[last].where() + " into " + gelu.where());
    for (std::size_t i : swallowed) removed_[i] = true;
    removed_[last] = false;  // the Gelu runs where the last of them did: every reader of its output comes later
    g_.nodes[last] = std::move(gelu);
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
  std::map<std::string, std::size_t> producer_;
  std::map<std::string, std::vector<std::size_t>> readers_;
  std::vector<bool> removed_;
};

}  // namespace

void fuse_gelu(Graph& g) { GeluFuser(g).run(); }

}  // namespace sluice::nn::passes
