#include "nn/describe.hpp"

#include <algorithm>
#include <cstdio>
#include <set>

namespace sluice::nn {
namespace {

constexpr std::int64_t kBytesPerValue = sizeof(float);

// "Conv+Add+Relu": the Conv (or Linear) with what was fused into it, in the order it is computed.
std::string op_label(const Node& n) {
  if (n.op != Op::Conv && n.op != Op::Linear) return op_name(n.op);
  std::string label = op_name(n.op);
  if (n.inputs.size() > 3 && !n.inputs[3].empty()) label += "+Add";
  if (const std::string act = n.attrs.s("activation", ""); !act.empty()) label += "+" + act;
  return label;
}

std::int64_t parameter_count(const Graph& g, const Node& n) {
  std::int64_t count = 0;
  for (const auto& in : n.inputs)
    if (!in.empty() && g.is_constant(in)) count += g.constants.at(in).elements();
  return count;
}

double flops(const Graph& g, const Node& n) {
  const Shape& out = g.shape_of(n.outputs[0]);
  if (n.op == Op::Conv) {
    const Shape& w = g.shape_of(n.inputs[1]);
    return 2.0 * static_cast<double>(element_count(out)) * static_cast<double>(w[1] * w[2] * w[3]);
  }
  if (n.op == Op::ConvTranspose) {  // every input pixel scatters into C_out/group x kH x kW outputs
    const Shape& w = g.shape_of(n.inputs[1]);
    return 2.0 * static_cast<double>(element_count(g.shape_of(n.inputs[0]))) * static_cast<double>(w[1] * w[2] * w[3]);
  }
  if (n.op == Op::Gemm) {
    const Shape& a = g.shape_of(n.inputs[0]);
    const std::int64_t k = n.attrs.i("transA", 0) ? a[0] : a[1];
    return 2.0 * static_cast<double>(element_count(out)) * static_cast<double>(k);
  }
  if (n.op == Op::MatMul || n.op == Op::Linear) return 2.0 * static_cast<double>(element_count(out)) * static_cast<double>(g.shape_of(n.inputs[0]).back());
  return 0.0;
}

std::string outputs_text(const Graph& g, const Node& n) {
  std::string text;
  for (const auto& out : n.outputs)
    if (!out.empty()) {
      if (!text.empty()) text += ' ';
      text += to_string(g.shape_of(out));
    }
  return text;
}

// Exact bytes, and a rounded size for reading: "3328 B (3.2 KiB)".
std::string bytes_text(std::int64_t bytes) {
  char text[64];
  const auto b = static_cast<double>(bytes);
  if (bytes >= (std::int64_t{1} << 20)) std::snprintf(text, sizeof text, "%lld B (%.1f MiB)", static_cast<long long>(bytes), b / (1 << 20));
  else if (bytes >= 1024) std::snprintf(text, sizeof text, "%lld B (%.1f KiB)", static_cast<long long>(bytes), b / 1024);
  else std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  return text;
}

struct ActivationMemory {
  std::int64_t total = 0, peak = 0;
};

// Every value held from its producer to its last reader (graph inputs from the start, outputs to the end).
ActivationMemory activation_memory(const Graph& g) {
  std::map<std::string, std::size_t> last_read;
  for (std::size_t i = 0; i < g.nodes.size(); ++i)
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && !g.is_constant(in)) last_read[in] = i;
  std::set<std::string> outputs;
  for (const auto& out : g.outputs) outputs.insert(out.name);
  auto size_of = [&](const std::string& v) { return element_count(g.shape_of(v)) * kBytesPerValue; };

  ActivationMemory m;
  std::int64_t live = 0;
  for (const auto& in : g.inputs) live += size_of(in.name);
  m.total = m.peak = live;
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    for (const auto& out : g.nodes[i].outputs)
      if (!out.empty()) {
        live += size_of(out);
        m.total += size_of(out);
      }
    m.peak = std::max(m.peak, live);
    std::set<std::string> freed;  // a node may read one value twice
    for (const auto& in : g.nodes[i].inputs)
      if (!in.empty() && !g.is_constant(in) && last_read.at(in) == i && !outputs.count(in) && freed.insert(in).second)
        live -= size_of(in);
  }
  return m;
}

}  // namespace

std::string describe_graph(const Graph& g) {
  std::size_t name_width = 4, op_width = 2, shape_width = 12;
  for (const auto& n : g.nodes) {
    name_width = std::max(name_width, n.name.size());
    op_width = std::max(op_width, op_label(n).size());
    shape_width = std::max(shape_width, outputs_text(g, n).size());
  }
  const int nw = static_cast<int>(name_width), ow = static_cast<int>(op_width), sw = static_cast<int>(shape_width);

  std::string text = g.source + ": opset " + std::to_string(g.opset) + ", " + std::to_string(g.nodes.size()) + " nodes\n";
  for (const auto& in : g.inputs) text += "  input  " + in.name + " " + to_string(in.shape) + "\n";
  for (const auto& out : g.outputs) text += "  output " + out.name + " " + to_string(out.shape) + "\n";

  char line[1024];
  std::snprintf(line, sizeof line, "%-*s  %-*s  %-*s  %10s  %10s\n", nw, "name", ow, "op", sw, "output shape", "params", "MFLOPs");
  text += line;
  std::int64_t total_params = 0;
  double total_flops = 0;
  for (const auto& n : g.nodes) {
    const std::int64_t params = parameter_count(g, n);
    const double f = flops(g, n);
    total_params += params;
    total_flops += f;
    std::snprintf(line, sizeof line, "%-*s  %-*s  %-*s  %10lld  %10.1f\n", nw, n.name.c_str(), ow, op_label(n).c_str(), sw,
                  outputs_text(g, n).c_str(), static_cast<long long>(params), f / 1e6);
    text += line;
  }
  std::int64_t weight_values = 0;
  for (const auto& [name, t] : g.constants) weight_values += t.elements();
  const ActivationMemory memory = activation_memory(g);
  std::snprintf(line, sizeof line, "total: %lld parameters, %.1f MFLOPs\n", static_cast<long long>(total_params), total_flops / 1e6);
  text += line;
  text += "weights (f32): " + bytes_text(weight_values * kBytesPerValue) + "\n";
  text += "activations (f32): " + bytes_text(memory.total) + " in all, peak " + bytes_text(memory.peak) + "\n";
  text += "rewrites (" + std::to_string(g.rewrites.size()) + "):\n";
  for (const auto& r : g.rewrites) text += "  " + r + "\n";
  return text;
}

}  // namespace sluice::nn
