#include "nn/cpu/layer.hpp"

#include <functional>
#include <map>
#include <set>

#include "nn/elementwise_math.hpp"

namespace sluice::nn::cpu {

void LayerContext::fail(const std::string& what) const { throw ModelError(graph_.source + ": " + node_.where() + ": " + what); }

const Shape& LayerContext::input_shape(std::size_t i) const {
  if (!has_input(i)) fail("input " + std::to_string(i) + " is missing");
  auto c = graph_.constants.find(node_.inputs[i]);
  if (c != graph_.constants.end()) return c->second.shape;
  auto s = graph_.shapes.find(node_.inputs[i]);
  if (s == graph_.shapes.end()) fail("no shape for input '" + node_.inputs[i] + "' (the graph is not prepared)");
  return s->second;
}

const Shape& LayerContext::output_shape(std::size_t i) const {
  if (i >= node_.outputs.size()) fail("output " + std::to_string(i) + " is missing");
  auto s = graph_.shapes.find(node_.outputs[i]);
  if (s == graph_.shapes.end()) fail("no shape for output '" + node_.outputs[i] + "' (the graph is not prepared)");
  return s->second;
}

Layout LayerContext::input_layout(std::size_t i) const {
  return has_input(i) ? layouts_.of(node_.inputs[i]) : Layout::nchw;
}

Layout LayerContext::output_layout(std::size_t i) const {
  return i < node_.outputs.size() ? layouts_.of(node_.outputs[i]) : Layout::nchw;
}

const Tensor& LayerContext::constant_input(std::size_t i, const std::string& role) const {
  if (!has_input(i)) fail(role + " (input " + std::to_string(i) + ") is missing");
  auto c = graph_.constants.find(node_.inputs[i]);
  if (c == graph_.constants.end()) fail(role + " '" + node_.inputs[i] + "' must be a constant");
  if (c->second.type != ElementType::f32) fail(role + " '" + node_.inputs[i] + "' must be floating point");
  return c->second;
}

void LayerContext::expect_inputs(std::size_t min, std::size_t max) const {
  std::size_t present = node_.inputs.size();
  while (present > 0 && node_.inputs[present - 1].empty()) --present;
  if (present < min || present > max)
    fail("takes " + (min == max ? std::to_string(min) : std::to_string(min) + " to " + std::to_string(max)) +
         " inputs, got " + std::to_string(present));
  for (std::size_t i = 0; i < min; ++i)
    if (node_.inputs[i].empty()) fail("input " + std::to_string(i) + " is missing");
}

void LayerContext::expect_outputs(std::size_t count) const {
  if (node_.outputs.size() != count)
    fail("has " + std::to_string(node_.outputs.size()) + " outputs, the CPU backend expects " + std::to_string(count));
  for (const auto& o : node_.outputs)
    if (o.empty()) fail("has an unnamed output");
}

void LayerContext::expect_output_shape(std::size_t i, const Shape& computed) const {
  const Shape& given = output_shape(i);
  if (given != computed)
    fail("output '" + node_.outputs[i] + "' has shape " + to_string(given) + " but the inputs give " +
         to_string(computed));
}

std::vector<std::int64_t> LayerContext::required_ints(const std::string& name) const {
  if (!attrs().has(name)) fail("attribute '" + name + "' is missing (the graph is not prepared)");
  try {
    return attrs().ints(name);
  } catch (const ModelError& e) {
    fail(e.what());
  }
}

std::unique_ptr<Layer> make_layer(const Graph& graph, const Node& node, const LayoutPlan& layouts) {
  using Factory = std::function<std::unique_ptr<Layer>(const LayerContext&)>;
  static const std::map<Op, Factory> factories = {
      {Op::Conv, make_conv},
      {Op::ConvTranspose, make_conv_transpose},
      {Op::BatchNormalization, make_batchnorm},
      {Op::MaxPool, make_pool},
      {Op::AveragePool, make_pool},
      {Op::GlobalAveragePool, make_global_average_pool},
      {Op::Gemm, make_gemm},
      {Op::MatMul, make_matmul},
      {Op::Linear, make_linear},
      {Op::Reshape, make_reshape},
      {Op::Transpose, make_transpose},
      {Op::Concat, make_concat},
      {Op::Split, make_split},
      {Op::Slice, make_slice},
      {Op::Pad, make_pad},
      {Op::Resize, make_resize},
      {Op::Softmax, make_softmax},
      {Op::LogSoftmax, make_softmax},
      {Op::ArgMax, make_arg_extreme},
      {Op::ArgMin, make_arg_extreme},
      {Op::TopK, make_top_k},
      {Op::GatherElements, make_gather_elements},
      {Op::GridSample, make_grid_sample},
      {Op::LayerNormalization, make_layer_normalization},
      {Op::Attention, make_attention},
  };
  // The ops whose layers take channels-last values (see plan_layouts), besides the activations.
  static const std::set<Op> layout_aware = {Op::Conv,        Op::ConvTranspose, Op::GlobalAveragePool, Op::MaxPool,
                                            Op::AveragePool, Op::Add,           Op::Sub,               Op::Mul,
                                            Op::Div};
  // The families of the op table (activations, nn/elementwise_math.hpp's kinds): one factory each.
  auto factory_of = [&](Op op) -> const Factory* {
    static const Factory binary = make_binary, unary_math = make_unary_math, reduce = make_reduce;
    static const Factory activation = make_unary;
    if (is_activation(op)) return &activation;
    if (binary_math_of(op)) return &binary;
    if (unary_math_of(op)) return &unary_math;
    if (reduce_math_of(op)) return &reduce;
    auto it = factories.find(op);
    return it == factories.end() ? nullptr : &it->second;
  };
  LayerContext ctx(graph, node, layouts);
  const Factory* factory = factory_of(node.op);
  if (!factory)
    ctx.fail("is not an op of the prepared form (the CPU backend runs only what prepare() leaves; was the graph "
             "prepared?)");
  if (!is_activation(node.op) && !layout_aware.count(node.op)) {
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      if (ctx.input_layout(i) != Layout::nchw) ctx.fail("input " + std::to_string(i) + " is channels last (internal error)");
    for (std::size_t i = 0; i < node.outputs.size(); ++i)
      if (ctx.output_layout(i) != Layout::nchw) ctx.fail("output " + std::to_string(i) + " is channels last (internal error)");
  }
  try {
    return (*factory)(ctx);
  } catch (const std::exception& e) {
    // Messages from Attributes' typed reads (an attribute of the wrong type) do not yet name the node.
    const std::string what = e.what();
    if (dynamic_cast<const ModelError*>(&e) && what.find(node.where()) != std::string::npos) throw;
    ctx.fail(what);
  }
}

}  // namespace sluice::nn::cpu
