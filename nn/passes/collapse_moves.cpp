// A chain of Reshape and Transpose nodes (each value in it read only by the next, no graph output) moves the
// elements of its input once, however long it is: it becomes one Reshape when the chain keeps the element order
// (two Transposes that undo each other around a reshape, as a patch embedding's Transpose back to NCHW and the
// model's own flatten + transpose to tokens), else Reshape -> one Transpose -> Reshape when it has two or more
// Transposes. Every Transpose is a copy on both backends; a Reshape costs nothing.
//
// The chain is followed symbolically: the input's dims are "atoms" in memory order; a Transpose reorders the
// current dims, a Reshape regroups the current order of atoms into new dims, splitting an atom where a new dim
// ends inside it. At the end the atoms' order says what the chain did. Dim 0 of the input (the batch) stays an
// atom of its own, so a chain that keeps the batch in front still does.
#include <algorithm>
#include <numeric>
#include <optional>

#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {
namespace {

constexpr std::size_t kMostDims = 6;  // what both backends' copies take

bool is_move(const Node& n) { return n.op == Op::Reshape || n.op == Op::Transpose; }

// The atoms of a chain's input and the chain's current dims, each a list of atoms (outer to inner).
class AtomTracker {
 public:
  explicit AtomTracker(const Shape& input) {
    for (std::int64_t size : input) {
      dims_.emplace_back();
      if (size == 1) continue;
      dims_.back().push_back(static_cast<int>(size_.size()));
      order_.push_back(static_cast<int>(size_.size()));
      size_.push_back(size);
    }
    if (!dims_.empty()) first_ = dims_[0];
  }

  void transpose(const std::vector<std::int64_t>& perm) {
    std::vector<std::vector<int>> moved;
    for (std::int64_t p : perm) moved.push_back(dims_.at(static_cast<std::size_t>(p)));
    dims_ = std::move(moved);
  }

  // False when a new dim would end inside an atom that its size does not divide (the chain is then left alone).
  bool reshape(const Shape& shape) {
    std::vector<int> flat = flattened();
    std::size_t next = 0;
    std::vector<std::vector<int>> regrouped;
    for (std::int64_t want : shape) {
      regrouped.emplace_back();
      std::int64_t have = 1;
      while (have < want) {
        if (next >= flat.size()) return false;
        const int atom = flat[next];
        const std::int64_t room = want / have;
        if (want % have != 0) return false;
        if (size_[static_cast<std::size_t>(atom)] > room) {  // the dim ends inside this atom: split it
          if (size_[static_cast<std::size_t>(atom)] % room != 0) return false;
          const int inner = split(atom, room);
          flat.insert(flat.begin() + static_cast<std::ptrdiff_t>(next) + 1, inner);
        }
        have *= size_[static_cast<std::size_t>(atom)];
        regrouped.back().push_back(atom);
        ++next;
      }
      if (have != want) return false;
    }
    if (next != flat.size()) return false;
    dims_ = std::move(regrouped);
    return true;
  }

  std::vector<int> flattened() const {
    std::vector<int> flat;
    for (const auto& d : dims_) flat.insert(flat.end(), d.begin(), d.end());
    return flat;
  }
  const std::vector<int>& memory_order() const { return order_; }
  std::int64_t size(int atom) const { return size_[static_cast<std::size_t>(atom)]; }
  // Whether the atom is (part of) the input's dim 0, which is not merged with other dims.
  bool in_first_dim(int atom) const { return std::find(first_.begin(), first_.end(), atom) != first_.end(); }

 private:
  // Atom `atom` of size s becomes its outer `outer` elements; a new atom of size s / outer follows it in memory.
  int split(int atom, std::int64_t outer) {
    const int inner = static_cast<int>(size_.size());
    size_.push_back(size_[static_cast<std::size_t>(atom)] / outer);
    size_[static_cast<std::size_t>(atom)] = outer;
    order_.insert(std::find(order_.begin(), order_.end(), atom) + 1, inner);
    for (auto& d : dims_)
      if (auto it = std::find(d.begin(), d.end(), atom); it != d.end()) d.insert(it + 1, inner);
    if (auto it = std::find(first_.begin(), first_.end(), atom); it != first_.end()) first_.insert(it + 1, inner);
    return inner;
  }

  std::vector<std::int64_t> size_;
  std::vector<int> order_;
  std::vector<std::vector<int>> dims_;
  std::vector<int> first_;
};

class MoveCollapser {
 public:
  explicit MoveCollapser(Graph& g) : g_(g), consumers_(consumer_counts(g)) {}

  void run() {
    std::vector<std::vector<std::size_t>> chains;
    std::map<std::string, std::size_t> open;  // the output of a chain's last node -> that chain
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      const Node& n = g_.nodes[i];
      if (!is_move(n)) continue;
      const std::string& in = n.inputs.at(0);
      std::size_t chain = chains.size();
      if (auto it = open.find(in); it != open.end() && has_single_use(g_, consumers_, in)) {
        chain = it->second;
        open.erase(it);
        chains[chain].push_back(i);
      } else {
        chains.push_back({i});
      }
      open[n.outputs.at(0)] = chain;
    }
    std::map<std::size_t, std::vector<Node>> replaced;  // the chain's last node -> what replaces the chain
    std::vector<bool> removed(g_.nodes.size(), false);
    for (const auto& chain : chains) {
      if (chain.size() < 2) continue;
      auto nodes = collapsed(chain);
      if (!nodes) continue;
      for (std::size_t i : chain) removed[i] = true;
      replaced[chain.back()] = std::move(*nodes);
    }
    std::vector<Node> out;
    for (std::size_t i = 0; i < g_.nodes.size(); ++i) {
      if (auto it = replaced.find(i); it != replaced.end())
        for (Node& n : it->second) out.push_back(std::move(n));
      else if (!removed[i])
        out.push_back(std::move(g_.nodes[i]));
    }
    g_.nodes = std::move(out);
  }

 private:
  std::optional<std::vector<Node>> collapsed(const std::vector<std::size_t>& chain) {
    const std::string source = g_.nodes[chain.front()].inputs.at(0);
    const Node& last = g_.nodes[chain.back()];
    const Shape from = g_.shape_of(source), to = g_.shape_of(last.outputs.at(0));
    AtomTracker atoms(from);
    int transposes = 0;
    for (std::size_t i : chain) {
      const Node& n = g_.nodes[i];
      if (n.op == Op::Transpose) {
        atoms.transpose(n.attrs.ints("perm"));
        ++transposes;
      } else if (!atoms.reshape(g_.shape_of(n.outputs.at(0)))) {
        return std::nullopt;
      }
    }
    const std::vector<int> flat = atoms.flattened(), &memory = atoms.memory_order();
    std::vector<Node> nodes;
    const auto add = [&](Op op, const std::string& role, const std::string& in, const Shape& shape, bool last_one) {
      const std::string name = last_one ? last.name : unused_value_name(g_, last.name + "/collapsed_" + role);
      Node n{name, op, {in}, {last_one ? last.outputs.at(0) : name}, {}};
      if (op == Op::Reshape) n.attrs.values["shape"] = std::vector<std::int64_t>(shape.begin(), shape.end());
      g_.shapes[n.outputs[0]] = shape;
      nodes.push_back(std::move(n));
      return nodes.back().outputs[0];
    };
    const std::string what = std::to_string(chain.size()) + " Reshape/Transpose nodes (" + std::to_string(transposes) +
                             " Transposes) ending at " + last.where();
    if (flat == memory) {
      add(Op::Reshape, "", source, to, true);
      g_.rewrites.push_back("collapsed " + what + " into one Reshape: they keep the element order");
      return nodes;
    }
    if (transposes < 2) return std::nullopt;
    // Runs of atoms that stay neighbours in the same order move as one dim.
    std::vector<std::size_t> position(memory.size());  // atom -> its place in the chain's output order
    for (std::size_t i = 0; i < flat.size(); ++i) position[static_cast<std::size_t>(flat[i])] = i;
    std::vector<std::vector<int>> groups;
    for (std::size_t i = 0; i < memory.size(); ++i) {
      const int atom = memory[i];
      const bool joins = i > 0 && position[static_cast<std::size_t>(atom)] == position[static_cast<std::size_t>(memory[i - 1])] + 1 &&
                         atoms.in_first_dim(atom) == atoms.in_first_dim(memory[i - 1]);
      if (joins) groups.back().push_back(atom);
      else groups.push_back({atom});
    }
    if (groups.size() > kMostDims) return std::nullopt;
    Shape grouped;
    for (const auto& grp : groups)
      grouped.push_back(std::accumulate(grp.begin(), grp.end(), std::int64_t{1},
                                        [&](std::int64_t p, int a) { return p * atoms.size(a); }));
    std::vector<std::int64_t> perm(groups.size());
    std::iota(perm.begin(), perm.end(), 0);
    std::sort(perm.begin(), perm.end(), [&](std::int64_t a, std::int64_t b) {
      return position[static_cast<std::size_t>(groups[static_cast<std::size_t>(a)][0])] <
             position[static_cast<std::size_t>(groups[static_cast<std::size_t>(b)][0])];
    });
    Shape moved;
    for (std::int64_t p : perm) moved.push_back(grouped[static_cast<std::size_t>(p)]);
    std::string value = source;
    if (grouped != from) value = add(Op::Reshape, "split", value, grouped, false);
    const bool reshape_after = moved != to;
    value = add(Op::Transpose, "move", value, moved, !reshape_after);
    nodes.back().attrs.values["perm"] = perm;
    if (reshape_after) add(Op::Reshape, "", value, to, true);
    g_.rewrites.push_back("collapsed " + what + " into one Transpose between Reshapes");
    return nodes;
  }

  Graph& g_;
  std::map<std::string, int> consumers_;
};

}  // namespace

void collapse_moves(Graph& g) { MoveCollapser(g).run(); }

}  // namespace sluice::nn::passes
