#pragma once
// Inside the CUDA engine: where each value lives, what one layer (one prepared node) needs to run, and the
// context a run gets. Only nn/cuda includes this.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "nn/cuda/engine.hpp"
#include "nn/cuda/kernels.cuh"
#include "nn/graph.hpp"
#include "runtime/format.hpp"
#include "runtime/gpu_handles.hpp"

namespace sluice::nn::cuda {

// One value of the graph: an activation (in the arena) or a constant (uploaded once, ONNX layout).
struct ValueSlot {
  std::string name;
  Shape shape;           // logical (ONNX) shape at the prepared batch
  bool constant = false;
  // The element type it is held in: the engine's, or f32 for an index value (nn/exact_indices.hpp) in an f16/bf16
  // engine, so that its integers stay exact. Constants are uploaded in the engine's type (see BuildContext).
  DType dtype = DType::f32;
  bool nhwc = false;     // 4-D activations are NHWC in memory; everything else is row-major in ONNX order
  bool batched = false;  // dim 0 is the batch: it shrinks to `count` in partial runs
  int alias_of = -1;     // a Reshape's output that shares its input's memory (the id of that input), see engine.cpp
  // A Slice's output that its only reader, a Concat, reads in place (engine.cpp): the sliced value's id, and the
  // Slice's starts and steps; alias_of is that value's memory root, and view() gives the window of that value.
  int window_of = -1;
  std::vector<std::int64_t> window_starts, window_steps;
  std::size_t bytes = 0;
  void* base = nullptr;  // the arena slot or the constant's upload
};

// Every value of the engine, by id, with the element type activations are held in.
class ValueTable {
 public:
  ValueTable(DType type, std::int64_t batch) : type_(type), batch_(batch) {}
  int add(ValueSlot slot);
  int id(const std::string& name) const;  // throws ModelError for an unknown name
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  ValueSlot& slot(int id) { return slots_.at(id); }
  const ValueSlot& slot(int id) const { return slots_.at(id); }
  std::size_t size() const { return slots_.size(); }
  DType type() const { return type_; }  // the engine's: every value's but the index values'
  DType type(int id) const { return slots_.at(static_cast<std::size_t>(id)).dtype; }
  std::size_t element_bytes() const { return dtype_bytes(type_); }
  std::int64_t batch() const { return batch_; }

  Shape shape_at(int id, int count) const;          // the logical shape in a run of `count` items
  std::vector<std::int64_t> strides(int id, const Shape& shape) const;  // element stride per logical dim
  View view(int id, int count) const;                // logical shape at count with the storage strides
  // The order of logical dims from outermost to innermost in memory ({0,2,3,1} for NHWC).
  std::vector<int> memory_order(int id) const;

 private:
  DType type_;
  std::int64_t batch_;
  std::vector<ValueSlot> slots_;
  std::map<std::string, int> index_;
};

// The 4-D activations held NHWC: those a Conv, ConvTranspose, pool, GlobalAveragePool or Resize reads or writes (their kernels
// take NHWC), together with every value tied to one of them by an op that keeps its input's layout (activations,
// elementwise math, BatchNormalization: one flat pass; Softmax and LogSoftmax, whose kernel writes y at x's
// offsets) or by a same-shape binary op. Every other 4-D value (an
// attention tensor [N, heads, T, d], a transposed [N, H, W, C]) stays row-major, so MatMul, LayerNormalization and
// reductions read it without staging.
std::set<std::string> nhwc_values(const Graph& graph);

// Puts the dims of two equal-shaped views into the destination's memory order (outermost first), so that a
// remap_copy writes coalesced.
void order_by_destination(View& dst, View& src);

// What a run hands to every layer. `ptr` is indexed by value id (bound inputs/outputs may point at the caller's
// memory); cuDNN/cuBLAS handles are already set to `stream`.
struct RunContext {
  cudaStream_t stream = nullptr;
  int count = 0;
  const std::vector<void*>* ptr = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cublasLtHandle_t cublas_lt = nullptr;
  void* cublas_workspace = nullptr;  // the cuBLAS handle's, lent to cuBLASLt calls (same stream, one at a time)
  std::size_t cublas_workspace_bytes = 0;
  void* workspace = nullptr;  // shared by all convolutions
  std::size_t workspace_bytes = 0;
  void* scratch = nullptr;    // shared by layers that stage data (explicit padding, layout changes, TopK's sort)
  std::size_t scratch_bytes = 0;
  void* at(int id) const { return (*ptr)[static_cast<std::size_t>(id)]; }
};

// Construction-time services for layers: the values, the precision, device uploads and the stream to use.
struct BuildContext {
  const Graph& graph;
  ValueTable& values;
  cudaStream_t stream;  // for uploads and measurements (construction may synchronise)
  cudnnHandle_t cudnn;
  std::vector<Memory>& weights;  // uploads live as long as the engine
  cublasLtHandle_t cublas_lt = nullptr;   // for Linear's algorithm choice
  std::size_t cublas_workspace_bytes = 0;  // what RunContext::cublas_workspace holds
  CudaEngineOptions::AttentionMode attention_mode = CudaEngineOptions::AttentionMode::automatic;
  std::size_t attention_scores_limit = 0;
  std::size_t weight_bytes = 0;
  // Upload host f32 data converted to the engine's element type (or kept f32 when `as_f32`).
  void* upload(const std::vector<float>& data, bool as_f32 = false);
  void* constant(const std::string& value);  // the value's upload (ONNX layout, element type), made once
  // The constant uploaded as `type` (the engine's: constant(value); f32: a separate upload, made once), for a
  // layer that computes index values in f32 in a narrower engine.
  const void* constant_as(const std::string& value, DType type);
  std::map<std::string, void*> f32_constants;
};

class Layer {
 public:
  Layer(const Node& node) : name_(node.name), op_(op_name(node.op)) {}
  virtual ~Layer() = default;
  const std::string& name() const { return name_; }
  const std::string& op() const { return op_; }
  // Host-only setup for runs of `count` items (descriptors, algorithm fit), before the first such run. `cudnn` is
  // the engine's handle now (it renews its handles after a failed capture): a layer keeps no older one.
  virtual void prepare(int /*count*/, cudnnHandle_t /*cudnn*/) {}
  virtual void run(const RunContext& ctx) = 0;
  virtual std::string kernel() const = 0;  // what runs: kernel or library algorithm
  virtual std::size_t workspace_bytes() const { return 0; }  // of the shared convolution workspace
  virtual std::size_t scratch_bytes() const { return 0; }    // of the shared scratch block
  // Why runs of fewer items than the batch are wrong for this layer ("" when they are fine).
  virtual std::string partial_batch_problem() const { return ""; }

 private:
  std::string name_, op_;
};

// A Conv's or Linear's "activation" with "act_alpha"/"act_beta" (graph.hpp); ModelError for an unknown one.
ActivationParams fused_activation(const Node& node);  // conv_layer.cpp

std::unique_ptr<Layer> make_gemm(const Node& node, BuildContext& ctx);    // Gemm, MatMul and Linear via cuBLAS(Lt)
std::unique_ptr<Layer> make_attention(const Node& node, BuildContext& ctx);  // attention_layer.cpp
// ConvTranspose via cuDNN's backward data; its algorithm is cuDNN's first that fits `workspace_limit`.
std::unique_ptr<Layer> make_conv_transpose(const Node& node, BuildContext& ctx, std::size_t workspace_limit);
std::unique_ptr<Layer> make_kernel_layer(const Node& node, BuildContext& ctx);  // everything else

}  // namespace sluice::nn::cuda
