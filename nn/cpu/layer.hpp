#pragma once
// One prepared-graph node as the CPU backend runs it. A layer checks its node against the prepared form of
// nn/graph.hpp when it is made (anything outside it is a ModelError naming the node), copies what it needs
// from the constants, and from then on only computes: no allocation, no lookups by name.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "nn/cpu/layout.hpp"
#include "nn/graph.hpp"

namespace sluice::nn::cpu {

class Layer {
 public:
  virtual ~Layer() = default;
  // Floats of temporary memory run() needs (im2col columns); the engine shares one buffer among all layers.
  virtual std::size_t scratch_floats() const { return 0; }  // 64-byte aligned
  // One pointer per node input (constants included; null for an absent optional input) and per node output,
  // f32, contiguous, in the shapes the prepared graph gives. Outputs never alias inputs.
  virtual void run(const float* const* inputs, float* const* outputs, float* scratch) const = 0;
  // When the only output is input 0's data as it lies from this offset (in floats) on (a Reshape, a Slice of one
  // contiguous block): the engine then lets the output share input 0's memory and runs the layer only where it
  // cannot (the output is a graph output).
  virtual std::optional<std::int64_t> view_offset() const { return std::nullopt; }
};

// What a layer factory may ask about its node.
class LayerContext {
 public:
  LayerContext(const Graph& graph, const Node& node, const LayoutPlan& layouts)
      : graph_(graph), node_(node), layouts_(layouts) {}
  const Graph& graph() const { return graph_; }
  const Node& node() const { return node_; }
  const Attributes& attrs() const { return node_.attrs; }

  // "<file>: node 'name' (Op): <what>"
  [[noreturn]] void fail(const std::string& what) const;

  bool has_input(std::size_t i) const { return i < node_.inputs.size() && !node_.inputs[i].empty(); }
  const Shape& input_shape(std::size_t i) const;
  const Shape& output_shape(std::size_t i) const;
  // Where the engine keeps input/output i (NCHW unless the layout plan made it channels last).
  Layout input_layout(std::size_t i) const;
  Layout output_layout(std::size_t i) const;
  // An input the prepared form requires to be an f32 constant (weights); `role` names it in the message.
  const Tensor& constant_input(std::size_t i, const std::string& role) const;

  // Arity checks: inputs counted up to the last present one.
  void expect_inputs(std::size_t min, std::size_t max) const;
  void expect_outputs(std::size_t count) const;
  // The prepared graph's shape for output i must equal what the op computes from its inputs.
  void expect_output_shape(std::size_t i, const Shape& computed) const;
  // A canonical attribute the prepared form always carries.
  std::vector<std::int64_t> required_ints(const std::string& name) const;

 private:
  const Graph& graph_;
  const Node& node_;
  const LayoutPlan& layouts_;
};

// Factories, one per concern (conv.cpp, pool.cpp, elementwise.cpp, ...).
std::unique_ptr<Layer> make_conv(const LayerContext& ctx);
std::unique_ptr<Layer> make_conv_transpose(const LayerContext& ctx);
std::unique_ptr<Layer> make_batchnorm(const LayerContext& ctx);
std::unique_ptr<Layer> make_unary(const LayerContext& ctx);   // Relu, Sigmoid, Tanh, HardSwish, LeakyRelu, ...
std::unique_ptr<Layer> make_binary(const LayerContext& ctx);  // Add, Sub, Mul, Div, Pow, Max, Min
std::unique_ptr<Layer> make_unary_math(const LayerContext& ctx);  // Erf, Sqrt, Exp, ... (nn/elementwise_math.hpp)
std::unique_ptr<Layer> make_reduce(const LayerContext& ctx);  // ReduceMean, ReduceSum, ...
std::unique_ptr<Layer> make_layer_normalization(const LayerContext& ctx);
std::unique_ptr<Layer> make_pool(const LayerContext& ctx);    // MaxPool, AveragePool
std::unique_ptr<Layer> make_global_average_pool(const LayerContext& ctx);
std::unique_ptr<Layer> make_gemm(const LayerContext& ctx);
std::unique_ptr<Layer> make_matmul(const LayerContext& ctx);
std::unique_ptr<Layer> make_linear(const LayerContext& ctx);  // matmul.cpp
std::unique_ptr<Layer> make_reshape(const LayerContext& ctx);
std::unique_ptr<Layer> make_transpose(const LayerContext& ctx);
std::unique_ptr<Layer> make_concat(const LayerContext& ctx);
std::unique_ptr<Layer> make_split(const LayerContext& ctx);
std::unique_ptr<Layer> make_slice(const LayerContext& ctx);
std::unique_ptr<Layer> make_pad(const LayerContext& ctx);
std::unique_ptr<Layer> make_resize(const LayerContext& ctx);
std::unique_ptr<Layer> make_attention(const LayerContext& ctx);  // attention.cpp
std::unique_ptr<Layer> make_softmax(const LayerContext& ctx);      // Softmax, LogSoftmax
std::unique_ptr<Layer> make_arg_extreme(const LayerContext& ctx);  // ArgMax, ArgMin (ranking.cpp)
std::unique_ptr<Layer> make_top_k(const LayerContext& ctx);
std::unique_ptr<Layer> make_gather_elements(const LayerContext& ctx);  // sampling.cpp
std::unique_ptr<Layer> make_grid_sample(const LayerContext& ctx);

// Dispatch on the node's op; an op outside the prepared form is a ModelError naming the node.
// Ops that read or write channels-last values are those plan_layouts() lets do so; for any other op a value
// in NHWC is an internal error, refused here.
std::unique_ptr<Layer> make_layer(const Graph& graph, const Node& node, const LayoutPlan& layouts);

}  // namespace sluice::nn::cpu
