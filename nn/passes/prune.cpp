// Removes nodes whose outputs nobody reads, constants no node reads, and shapes of values that are gone.
#include "nn/passes/pass_support.hpp"

namespace sluice::nn::passes {

void prune(Graph& g) {
  std::set<std::string> live;
  for (const auto& out : g.outputs) live.insert(out.name);
  std::vector<bool> keep(g.nodes.size(), false);
  for (std::size_t i = g.nodes.size(); i-- > 0;) {
    const Node& node = g.nodes[i];
    for (const auto& out : node.outputs) keep[i] = keep[i] || (!out.empty() && live.count(out));
    if (!keep[i]) continue;
    for (const auto& in : node.inputs)
      if (!in.empty()) live.insert(in);
  }
  std::vector<Node> kept;
  std::map<std::string, Shape> shapes;
  for (const auto& in : g.inputs) shapes[in.name] = g.shapes.at(in.name);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) {
      g.rewrites.push_back("removed dead " + g.nodes[i].where());
      continue;
    }
    for (const auto& out : g.nodes[i].outputs)
      if (auto s = g.shapes.find(out); s != g.shapes.end()) shapes.insert(*s);
    kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  g.shapes = std::move(shapes);
  std::erase_if(g.constants, [&](const auto& entry) { return !live.count(entry.first); });
}

}  // namespace sluice::nn::passes
